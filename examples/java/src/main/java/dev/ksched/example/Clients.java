package dev.ksched.example;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** The Kafka clients of the example, configured as docs/contract.md asks. */
final class Clients {
    private Clients() {}

    /**
     * Keys are schedule ids as UTF-8 ({@code StringSerializer}); no {@code partitioner.class}: the
     * default sends a keyed record to {@code murmur2(key) & 0x7fffffff % partitions} (contract §3).
     * Idempotent with {@code acks=all} (contract §6): a retried send is never written twice.
     */
    static KafkaProducer<String, byte[]> producer(Config cfg, String clientId) {
        Properties p = cfg.kafka(clientId);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        return new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    }

    /** A read_committed consumer; {@code group} null: no group (assign() only, nothing committed). */
    static KafkaConsumer<String, byte[]> consumer(Config cfg, String clientId, String group) {
        Properties p = cfg.kafka(clientId);
        p.put("isolation.level", "read_committed"); // the processor writes in transactions
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        if (group != null) {
            p.put("group.id", group);
        }
        return new KafkaConsumer<>(p, new StringDeserializer(), new ByteArrayDeserializer());
    }

    /** Every partition of {@code topic}, or an error naming the fix when it does not exist. */
    static List<TopicPartition> partitions(KafkaConsumer<?, ?> c, String topic, String tenant) {
        Map<String, List<PartitionInfo>> topics = c.listTopics(Duration.ofSeconds(30));
        List<PartitionInfo> infos = topics.get(topic);
        if (infos == null || infos.isEmpty()) {
            throw new IllegalStateException("topic " + topic + " does not exist or is not readable by this tenant: "
                    + "register the tenant with `ksched tenants add " + tenant + "` (or run `ksched topics apply`)");
        }
        return infos.stream().map(i -> new TopicPartition(topic, i.partition())).sorted(
                (a, b) -> Integer.compare(a.partition(), b.partition())).collect(Collectors.toList());
    }
}
