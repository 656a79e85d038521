package dev.ksched.example;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.avro.generic.GenericRecord;

/** {@code java -jar ksched-java-example.jar ids | publish | work | help} (README.md). */
public final class Main {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String USAGE = String.join("\n",
            "usage: java -jar ksched-java-example.jar COMMAND [--option value ...]",
            "  ids       read 'tenant<TAB>key<TAB>version<TAB>scheduled_for_epoch_s<TAB>partitions' lines on stdin;",
            "            print each line's schedule id, occurrence id and the Java producer's partition as JSON",
            "  fingerprints  print each record schema's full name and single-object fingerprint as JSON",
            "  publish   --tenant T --key K [--in-s 10] [--handler echo] [--payload TEXT]",
            "            create a one-time schedule firing in --in-s seconds, update its payload (expected",
            "            version 1), create a second one (key K-canceled) and cancel it; print each result",
            "  work      --tenant T [--worker-id ID] [--out FILE] [--exit-after N] [--heartbeat-s 5] [--echo-s 0]",
            "            run the tenant's occurrences: handler 'echo' takes --echo-s seconds, then appends the",
            "            payload to --out (once per occurrence id); 'fail' fails for good; exit after N final",
            "            reports (0: run until SIGTERM)",
            "environment: KSCHED_BOOTSTRAP (default 127.0.0.1:9092), KSCHED_NAMESPACE (ksched),",
            "  KSCHED_CREDENTIALS_FILE (the embedded broker's credentials.json) or KSCHED_SASL_USERNAME and",
            "  KSCHED_SASL_PASSWORD, KSCHED_SECURITY_PROTOCOL, KSCHED_SASL_MECHANISM, KSCHED_SCHEMAS_DIR");

    private Main() {}

    public static void main(String[] argv) {
        if (argv.length == 0 || argv[0].equals("help") || argv[0].equals("--help")) {
            System.out.println(USAGE);
            return;
        }
        try {
            Map<String, String> opts = options(argv);
            switch (argv[0]) {
                case "ids" -> ids();
                case "fingerprints" -> fingerprints();
                case "publish" -> System.exit(publish(opts));
                case "work" -> work(opts);
                default -> throw new IllegalArgumentException("unknown command " + argv[0] + "\n" + USAGE);
            }
        } catch (IllegalArgumentException e) {
            System.err.println("ksched-java-example: " + e.getMessage());
            System.exit(2);
        } catch (Exception e) {
            System.err.println("ksched-java-example: " + e.getMessage());
            System.exit(1);
        }
    }

    private static Map<String, String> options(String[] argv) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --option value, got " + argv[i] + "\n" + USAGE);
            }
            opts.put(argv[i].substring(2), argv[i + 1]);
        }
        return opts;
    }

    private static String required(Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("--" + name + " is required\n" + USAGE);
        }
        return v;
    }

    private static int intOption(Map<String, String> opts, String name, int dflt) {
        try {
            return Integer.parseInt(opts.getOrDefault(name, String.valueOf(dflt)));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + name + " " + opts.get(name) + ": expected a whole number");
        }
    }

    static synchronized void emit(Map<String, ?> line) {
        try {
            System.out.println(JSON.writeValueAsString(line));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
        System.out.flush();
    }

    private static void ids() throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] f = line.split("\t", -1);
            if (f.length != 5) {
                throw new IllegalArgumentException("ids: expected 5 tab-separated fields, got: " + line);
            }
            String sid = Ids.scheduleId(f[0], f[1]);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("schedule_id", sid);
            out.put("occurrence_id", Ids.occurrenceId(sid, Long.parseLong(f[2]), Long.parseLong(f[3])));
            out.put("partition", Ids.partitionFor(sid, Integer.parseInt(f[4])));
            emit(out);
        }
    }

    private static void fingerprints() throws IOException {
        Records records = Records.load(Config.schemasDir(System.getenv()));
        records.schemas().values().stream()
                .filter(s -> s.getType() == org.apache.avro.Schema.Type.RECORD)
                .sorted((a, b) -> a.getFullName().compareTo(b.getFullName()))
                .forEach(s -> emit(Map.of("name", s.getFullName(), "fingerprint", Records.fingerprintHex(s))));
    }

    private static int publish(Map<String, String> opts) throws IOException {
        Config cfg = Config.fromEnv(required(opts, "tenant"), System.getenv());
        String key = required(opts, "key");
        String handler = opts.getOrDefault("handler", "echo");
        String payload = opts.getOrDefault("payload", "hello from Java");
        int inSeconds = intOption(opts, "in-s", 10);
        Records records = Records.load(cfg.schemasDir());
        int rejected = 0;
        try (Publisher pub = new Publisher(cfg, records)) {
            // Counted from now, once connected: the update and the cancel land well before it fires.
            Instant at = Instant.ofEpochSecond(Instant.now().getEpochSecond() + inSeconds);
            long t = System.nanoTime();
            GenericRecord created = pub.create(key, pub.onceSpec(at, handler, "draft: " + payload));
            rejected += report("create", created, at, t);
            String sid = Records.str(created, "schedule_id");
            t = System.nanoTime();
            rejected += report("update", pub.update(sid, pub.onceSpec(at, handler, payload), 1L), at, t);
            t = System.nanoTime();
            GenericRecord doomed = pub.create(key + "-canceled", pub.onceSpec(at, handler, payload));
            rejected += report("create", doomed, at, t);
            t = System.nanoTime();
            rejected += report("cancel", pub.cancel(Records.str(doomed, "schedule_id")), at, t);
        }
        return rejected == 0 ? 0 : 1;
    }

    private static int report(String step, GenericRecord result, Instant at, long sentAt) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("step", step);
        for (String f : new String[] {"request_id", "schedule_id", "status", "code", "reason"}) {
            out.put(f, Records.str(result, f));
        }
        out.put("version", result.get("version"));
        out.put("scheduled_for", at.getEpochSecond());
        out.put("answered_in_ms", (System.nanoTime() - sentAt) / 1_000_000);
        emit(out);
        return "ACCEPTED".equals(Records.str(result, "status")) ? 0 : 1;
    }

    private static void work(Map<String, String> opts) throws Exception {
        Config cfg = Config.fromEnv(required(opts, "tenant"), System.getenv());
        String workerId = opts.getOrDefault("worker-id", "java-" + UUID.randomUUID().toString().substring(0, 8));
        Path out = opts.containsKey("out") ? Path.of(opts.get("out")) : null;
        Map<String, Worker.Handler> handlers = new HashMap<>();
        int echoSeconds = intOption(opts, "echo-s", 0);
        handlers.put("echo", ctx -> {
            Thread.sleep(echoSeconds * 1000L); // a long handler: the heartbeats keep its lease
            echo(ctx, out);
        });
        handlers.put("fail", ctx -> {
            throw new Worker.PermanentFailure("the 'fail' handler always fails");
        });
        Records records = Records.load(cfg.schemasDir());
        Worker worker = new Worker(cfg, records, handlers, workerId, Duration.ofSeconds(intOption(opts, "heartbeat-s", 5)));
        Thread main = Thread.currentThread();
        Thread hook = new Thread(() -> {
            worker.stop();
            try {
                main.join(30_000); // let run() commit and close
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            worker.run(intOption(opts, "exit-after", 0));
        } finally {
            worker.close();
        }
    }

    /** The example's side effect, idempotent on the occurrence id (contract §7.3): one line per occurrence. */
    private static synchronized void echo(Worker.Context ctx, Path out) throws IOException {
        String line = ctx.occurrenceId() + "\t" + ctx.scheduleId() + "\t" + ctx.version() + "\t"
                + new String(ctx.payload(), StandardCharsets.UTF_8);
        System.err.println("echo: " + line);
        if (out == null) {
            return;
        }
        if (Files.exists(out) && Files.readAllLines(out).stream().anyMatch(l -> l.startsWith(ctx.occurrenceId() + "\t"))) {
            return; // already done: a redelivery
        }
        Files.writeString(out, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }
}
