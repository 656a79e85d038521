package dev.ksched.example;

import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;

/**
 * The worker's view of {@code <ns>.versions.<t>} (docs/contract.md §7.1): every partition read from
 * the beginning by a thread of its own (no group), {@code schedule_id -> version, state, last pause};
 * a tombstone removes the schedule. {@link #awaitCaughtUp} returns once every partition was read to
 * the end it had at start, so the worker runs nothing on a view older than its own start.
 */
final class VersionsView implements AutoCloseable {
    record State(long version, String state, Long pausedAtMs, Long resumedAtMs) {}

    private final Config cfg;
    private final Records records;
    private final Map<String, State> states = new ConcurrentHashMap<>();
    private final CountDownLatch caughtUp = new CountDownLatch(1);
    private final KafkaConsumer<String, byte[]> consumer;
    private final Thread thread;
    private volatile boolean stopped;
    private volatile Exception error;

    VersionsView(Config cfg, Records records) {
        this.cfg = cfg;
        this.records = records;
        this.consumer = Clients.consumer(cfg, "ksched-java-view-" + cfg.tenant(), null);
        this.thread = new Thread(this::run, "versions-" + cfg.tenant());
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    boolean awaitCaughtUp(Duration timeout) throws InterruptedException {
        boolean ok = caughtUp.await(timeout.toMillis(), TimeUnit.MILLISECONDS);
        if (error != null) {
            throw new IllegalStateException("the versions view failed: " + error.getMessage(), error);
        }
        return ok;
    }

    private void run() {
        try {
            List<TopicPartition> parts = Clients.partitions(consumer, cfg.topic("versions"), cfg.tenant());
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> end = consumer.endOffsets(parts, Duration.ofSeconds(30));
            while (!stopped) {
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    apply(r);
                }
                if (caughtUp.getCount() > 0 && end.entrySet().stream().allMatch(
                        e -> consumer.position(e.getKey()) >= e.getValue())) {
                    caughtUp.countDown();
                }
            }
        } catch (WakeupException e) {
            // close()
        } catch (Exception e) {
            error = e;
            caughtUp.countDown();
        } finally {
            consumer.close(Duration.ofSeconds(5));
        }
    }

    private void apply(ConsumerRecord<String, byte[]> r) {
        if (r.value() == null) {
            if (r.key() != null) {
                states.remove(r.key()); // tombstone: the schedule was purged
            }
            return;
        }
        GenericRecord v;
        try {
            v = records.decode("VersionRecord", r.value());
        } catch (IOException | RuntimeException e) {
            System.err.println("versions: skipping an undecodable record at " + r.topic() + "[" + r.partition() + "]@" + r.offset());
            return;
        }
        states.put(Records.str(v, "schedule_id"), new State(
                Records.num(v, "version"), Records.str(v, "state"),
                (Long) v.get("paused_at_ms"), (Long) v.get("resumed_at_ms")));
    }

    /**
     * Why an occurrence must not run, or null to run it (contract §7.1). Absent from the view, or an
     * older version there: run (the version record may arrive after the dispatch record).
     */
    String verdict(String scheduleId, long version, long scheduledForMs) {
        State s = states.get(scheduleId);
        if (s == null || s.version() < version) {
            return null;
        }
        if (s.version() > version) {
            return "superseded by version " + s.version();
        }
        if (s.state().equals("CANCELED")) {
            return "schedule canceled";
        }
        if (s.state().equals("PAUSED")) {
            return "schedule paused";
        }
        Long paused = s.pausedAtMs();
        Long resumed = s.resumedAtMs();
        if (paused != null && resumed != null && resumed >= paused && scheduledForMs <= resumed) {
            return "not run: schedule was paused at " + utc(paused) + " while this occurrence ("
                    + utc(scheduledForMs) + ") was pending; resumed at " + utc(resumed);
        }
        return null;
    }

    private static String utc(long ms) {
        return Instant.ofEpochSecond(Math.floorDiv(ms, 1000)).toString(); // 2027-01-01T00:00:00Z
    }

    @Override
    public void close() throws InterruptedException {
        stopped = true;
        consumer.wakeup();
        thread.join(10_000);
    }
}
