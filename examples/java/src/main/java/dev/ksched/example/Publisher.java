package dev.ksched.example;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Publishes schedule commands to {@code <ns>.commands.<t>} and waits for each answer on
 * {@code <ns>.results.<t>} (docs/contract.md §6).
 */
final class Publisher implements AutoCloseable {
    private static final DateTimeFormatter LOCAL = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss");

    private final Config cfg;
    private final Records records;
    private final KafkaProducer<String, byte[]> producer;
    private final KafkaConsumer<String, byte[]> results;

    Publisher(Config cfg, Records records) {
        this.cfg = cfg;
        this.records = records;
        this.producer = Clients.producer(cfg, "ksched-java-publisher-" + cfg.tenant());
        this.results = Clients.consumer(cfg, "ksched-java-results-" + cfg.tenant(), null);
        // Step 1: start reading the results at their current end, resolved *before* sending anything:
        // an answer written before a lazily resolved "end" would be skipped.
        List<TopicPartition> parts = Clients.partitions(results, cfg.topic("results"), cfg.tenant());
        results.assign(parts);
        results.seekToEnd(parts);
        for (TopicPartition tp : parts) {
            results.position(tp, Duration.ofSeconds(30)); // forces the lookup now
        }
    }

    /** A one-time spec firing at {@code at} (UTC); every other field takes its schema default. */
    GenericRecord onceSpec(Instant at, String handler, String payload) {
        Schema spec = records.schema("ScheduleSpec");
        return new GenericRecordBuilder(spec)
                .set("kind", new GenericData.EnumSymbol(spec.getField("kind").schema(), "once"))
                .set("at", LOCAL.format(at.atOffset(ZoneOffset.UTC)))
                .set("timezone", "UTC")
                .set("handler", handler)
                .set("payload", ByteBuffer.wrap(payload.getBytes(StandardCharsets.UTF_8)))
                .build();
    }

    GenericRecord create(String key, GenericRecord spec) throws IOException {
        // The keyed id, computed here: the record must be keyed (and so partitioned) by it.
        return send(command("CREATE", Ids.scheduleId(cfg.tenant(), key), key, null, spec));
    }

    GenericRecord update(String scheduleId, GenericRecord spec, Long expectedVersion) throws IOException {
        return send(command("UPDATE", scheduleId, null, expectedVersion, spec));
    }

    GenericRecord cancel(String scheduleId) throws IOException {
        return send(command("CANCEL", scheduleId, null, null, null));
    }

    private GenericRecord command(String kind, String scheduleId, String key, Long expectedVersion, GenericRecord spec) {
        Schema schema = records.schema("ScheduleCommand");
        return new GenericRecordBuilder(schema)
                .set("request_id", UUID.randomUUID().toString().replace("-", ""))
                .set("tenant", cfg.tenant())
                .set("schedule_id", scheduleId)
                .set("idempotency_key", key)
                .set("kind", new GenericData.EnumSymbol(records.schema("CommandKind"), kind))
                .set("expected_version", expectedVersion)
                .set("spec", spec)
                .set("issued_at_ms", System.currentTimeMillis())
                .build();
    }

    /**
     * Steps 2 and 3: produce keyed by the schedule id, wait for the broker's ack, then for the
     * {@code CommandResult} with the same request id. On a timeout the command may still be
     * applied: re-send the same record (same request id) to learn its outcome.
     */
    GenericRecord send(GenericRecord command) throws IOException {
        String requestId = Records.str(command, "request_id");
        String scheduleId = Records.str(command, "schedule_id");
        RecordMetadata sent;
        try {
            sent = producer.send(new ProducerRecord<>(cfg.topic("commands"), scheduleId, records.encode(command))).get();
        } catch (Exception e) {
            throw new IOException("could not produce to " + cfg.topic("commands") + ": " + e.getMessage(), e);
        }
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            for (ConsumerRecord<String, byte[]> r : results.poll(Duration.ofMillis(200))) {
                if (r.value() == null) {
                    continue;
                }
                GenericRecord result;
                try {
                    result = records.decode("CommandResult", r.value());
                } catch (IOException | RuntimeException e) {
                    continue; // not a record this client can read: not ours
                }
                if (requestId.equals(Records.str(result, "request_id"))) {
                    return result;
                }
            }
        }
        throw new IOException("no answer to request " + requestId + " (partition " + sent.partition() + " of "
                + cfg.topic("commands") + ") within 60 s: is a processor running? Re-send the same command to learn its outcome");
    }

    @Override
    public void close() {
        producer.close(Duration.ofSeconds(10));
        results.close(Duration.ofSeconds(10));
    }
}
