package dev.ksched.example;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.Collection;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;

/**
 * Runs a tenant's occurrences (docs/contract.md §7): consumes {@code <ns>.dispatch.<t>} in the group
 * {@code <ns>.tenant.<t>.worker} (read_committed, no auto-commit), rechecks each occurrence against
 * the versions view, reports STARTED with a fresh token, HEARTBEATs while the handler runs, then
 * SUCCEEDED or FAILED to {@code <ns>.commands.<t>} keyed by the schedule id, and commits the record's
 * offset only once the broker acknowledged that final report.
 *
 * <p>One record at a time, for clarity: a real worker runs several on a pool and commits, per
 * partition, past the records whose final reports are all acknowledged. A handler must finish
 * within {@code max.poll.interval.ms} (5 min by default) or the group moves its partitions away.
 */
final class Worker implements AutoCloseable {
    static final String CANCELED = "ksched.Canceled";
    static final String UNKNOWN_HANDLER = "ksched.UnknownHandler";

    /** What a handler sees of one attempt. */
    record Context(String tenant, String scheduleId, String occurrenceId, long version, long scheduledForMs,
                   int attempt, String handler, byte[] payload, String token, Long deadlineMs) {}

    @FunctionalInterface
    interface Handler {
        void run(Context ctx) throws Exception;
    }

    /** A failure that retrying cannot fix: reported with {@code retryable=false} (the occurrence goes DEAD). */
    static final class PermanentFailure extends Exception {
        private static final long serialVersionUID = 1L;

        PermanentFailure(String message) {
            super(message);
        }
    }

    private static final SecureRandom RANDOM = new SecureRandom();

    private final Config cfg;
    private final Records records;
    private final Map<String, Handler> handlers;
    private final String workerId;
    private final Duration heartbeat;
    private final KafkaProducer<String, byte[]> producer;
    private final KafkaConsumer<String, byte[]> consumer;
    private final VersionsView view;
    private final ScheduledExecutorService beats = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "heartbeats");
        t.setDaemon(true);
        return t;
    });
    private volatile boolean running = true;
    private int finals;

    Worker(Config cfg, Records records, Map<String, Handler> handlers, String workerId, Duration heartbeat) {
        this.cfg = cfg;
        this.records = records;
        this.handlers = handlers;
        this.workerId = workerId;
        this.heartbeat = heartbeat;
        this.producer = Clients.producer(cfg, "ksched-java-worker-" + workerId);
        this.consumer = Clients.consumer(cfg, "ksched-java-worker-" + workerId, cfg.groupPrefix() + "worker");
        this.view = new VersionsView(cfg, records);
    }

    /** Runs until {@link #stop} or until {@code exitAfter} final reports (0: no limit). */
    void run(int exitAfter) throws Exception {
        view.start();
        if (!view.awaitCaughtUp(Duration.ofSeconds(60))) {
            throw new IllegalStateException("the versions view did not reach the end of " + cfg.topic("versions") + " within 60 s");
        }
        Clients.partitions(consumer, cfg.topic("dispatch"), cfg.tenant()); // fail early, naming the fix
        consumer.subscribe(java.util.List.of(cfg.topic("dispatch")), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                Main.emit(Map.of("event", "assigned", "partitions", parts.stream().map(TopicPartition::partition).sorted().toList()));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {}
        });
        try {
            while (running && (exitAfter <= 0 || finals < exitAfter)) {
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    handle(r);
                    // Past this record only now: its final report is durable (contract §7.4).
                    consumer.commitSync(Map.of(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1)));
                    if (!running) {
                        break;
                    }
                }
            }
        } catch (WakeupException e) {
            if (running) {
                throw e;
            }
        }
    }

    void stop() {
        running = false;
        consumer.wakeup();
    }

    private void handle(ConsumerRecord<String, byte[]> r) throws IOException, InterruptedException {
        if (r.value() == null) {
            return;
        }
        GenericRecord occ;
        try {
            occ = records.decode("Occurrence", r.value());
        } catch (IOException | RuntimeException e) {
            malformed(r, "undecodable (" + e.getMessage() + ")");
            return;
        }
        if (!cfg.tenant().equals(Records.str(occ, "tenant"))) {
            malformed(r, "names tenant " + Records.str(occ, "tenant")); // the topic is the tenant (contract §2)
            return;
        }
        ByteBuffer payload = (ByteBuffer) occ.get("payload");
        byte[] bytes = new byte[payload.remaining()];
        payload.duplicate().get(bytes);
        Context ctx = new Context(cfg.tenant(), Records.str(occ, "schedule_id"), Records.str(occ, "occurrence_id"),
                Records.num(occ, "version"), Records.num(occ, "scheduled_for_ms"), ((Number) occ.get("attempt")).intValue(),
                Records.str(occ, "handler"), bytes, HexFormat.of().formatHex(randomToken()), (Long) occ.get("deadline_ms"));

        String reason = view.verdict(ctx.scheduleId(), ctx.version(), ctx.scheduledForMs());
        if (reason != null) {
            finish(ctx, r, "FAILED", false, CANCELED, reason); // not run: stale, canceled or paused
            return;
        }
        Handler fn = handlers.get(ctx.handler());
        if (fn == null) {
            finish(ctx, r, "FAILED", true, UNKNOWN_HANDLER, "no handler named '" + ctx.handler() + "' on worker " + workerId);
            return;
        }
        send(ctx, "STARTED", null, null, null);
        Object lock = new Object();
        boolean[] done = {false};
        ScheduledFuture<?> beat = beats.scheduleAtFixedRate(() -> {
            synchronized (lock) { // never a heartbeat after the final report
                if (!done[0]) {
                    send(ctx, "HEARTBEAT", null, null, null);
                }
            }
        }, heartbeat.toMillis(), heartbeat.toMillis(), TimeUnit.MILLISECONDS);
        String kind = "SUCCEEDED";
        Boolean retryable = null;
        String errorClass = null;
        String message = null;
        try {
            fn.run(ctx);
        } catch (Exception e) {
            kind = "FAILED";
            retryable = !(e instanceof PermanentFailure);
            errorClass = e.getClass().getName();
            message = String.valueOf(e.getMessage());
        } finally {
            synchronized (lock) {
                done[0] = true;
                beat.cancel(false);
            }
        }
        finish(ctx, r, kind, retryable, errorClass, message);
    }

    private static byte[] randomToken() {
        byte[] token = new byte[16];
        RANDOM.nextBytes(token);
        return token;
    }

    /** The final report, waited for until the broker acknowledged it (retried while it is not). */
    private void finish(Context ctx, ConsumerRecord<String, byte[]> r, String kind, Boolean retryable, String errorClass,
                        String message) throws InterruptedException {
        while (true) {
            try {
                send(ctx, kind, retryable, errorClass, message).get(60, TimeUnit.SECONDS);
                break;
            } catch (ExecutionException | TimeoutException e) {
                System.err.println("final report of " + ctx.occurrenceId() + " not acknowledged (" + e + "): sending it again");
            }
        }
        finals++;
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", "final");
        line.put("kind", kind);
        line.put("error_class", errorClass);
        line.put("error_message", message);
        line.put("occurrence_id", ctx.occurrenceId());
        line.put("schedule_id", ctx.scheduleId());
        line.put("version", ctx.version());
        line.put("attempt", ctx.attempt());
        line.put("token", ctx.token());
        line.put("partition", r.partition());
        line.put("offset", r.offset());
        Main.emit(line);
    }

    private java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata> send(
            Context ctx, String kind, Boolean retryable, String errorClass, String message) {
        GenericRecord report = new GenericRecordBuilder(records.schema("AttemptReport"))
                .set("occurrence_id", ctx.occurrenceId())
                .set("schedule_id", ctx.scheduleId())
                .set("tenant", ctx.tenant())
                .set("version", ctx.version())
                .set("scheduled_for_ms", ctx.scheduledForMs())
                .set("attempt", ctx.attempt())
                .set("token", ctx.token())
                .set("kind", new GenericData.EnumSymbol(records.schema("AttemptReport").getField("kind").schema(), kind))
                .set("retryable", retryable)
                .set("error_class", errorClass)
                .set("error_message", message == null ? null : truncate(message, 1000))
                .set("worker_id", workerId)
                .set("reported_at_ms", System.currentTimeMillis())
                .build();
        return producer.send(new ProducerRecord<>(cfg.topic("commands"), ctx.scheduleId(), records.encode(report)));
    }

    private static String truncate(String s, int max) {
        return s.length() <= max ? s : s.substring(0, max);
    }

    private void malformed(ConsumerRecord<String, byte[]> r, String why) {
        System.err.println("skipping " + r.topic() + "[" + r.partition() + "]@" + r.offset() + ": " + why);
    }

    @Override
    public void close() throws InterruptedException {
        beats.shutdownNow();
        view.close();
        consumer.close(Duration.ofSeconds(10));
        producer.close(Duration.ofSeconds(10));
    }
}
