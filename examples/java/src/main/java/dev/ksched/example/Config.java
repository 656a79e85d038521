package dev.ksched.example;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;

/**
 * Where the cluster is and who this process is, from the same environment variables as ksched's own
 * processes (docs/security.md): a tenant's principal is {@code <ns>.tenant.<t>}; its password is the
 * one in the credentials file the embedded broker writes, unless KSCHED_SASL_PASSWORD gives it.
 */
public record Config(
        String bootstrap,
        String namespace,
        String tenant,
        String protocol,
        String mechanism,
        String username,
        String password,
        Path schemasDir) {

    private static final Pattern TENANT = Pattern.compile("^[a-z][a-z0-9-]{0,39}$");

    public static Config fromEnv(String tenant, Map<String, String> env) throws IOException {
        if (tenant == null || !TENANT.matcher(tenant).matches()) {
            throw new IllegalArgumentException("--tenant " + tenant + ": a tenant name is 1-40 characters of a-z 0-9 -, starting with a letter");
        }
        String bootstrap = env.getOrDefault("KSCHED_BOOTSTRAP", "");
        if (bootstrap.isEmpty()) {
            bootstrap = "127.0.0.1:" + env.getOrDefault("KSCHED_KAFKA_PORT", "9092"); // ksched's embedded broker
        }
        String namespace = env.getOrDefault("KSCHED_NAMESPACE", "ksched");
        String protocol = env.getOrDefault("KSCHED_SECURITY_PROTOCOL", "SASL_PLAINTEXT");
        String mechanism = env.getOrDefault("KSCHED_SASL_MECHANISM", "SCRAM-SHA-512");
        String username = env.getOrDefault("KSCHED_SASL_USERNAME", "");
        if (username.isEmpty()) {
            username = namespace + ".tenant." + tenant;
        }
        String password = env.getOrDefault("KSCHED_SASL_PASSWORD", "");
        if (password.isEmpty() && protocol.startsWith("SASL")) {
            password = passwordFromFile(credentialsFile(env), username);
        }
        return new Config(bootstrap, namespace, tenant, protocol, mechanism, username, password, schemasDir(env));
    }

    /** KSCHED_CREDENTIALS_FILE, else {@code <kafka data dir>/credentials.json} as ksched's settings define it. */
    static Path credentialsFile(Map<String, String> env) {
        String explicit = env.getOrDefault("KSCHED_CREDENTIALS_FILE", "");
        if (!explicit.isEmpty()) {
            return Path.of(explicit.replaceFirst("^~", System.getProperty("user.home")));
        }
        String dataDir = env.getOrDefault("KSCHED_KAFKA_DATA_DIR", "");
        if (dataDir.isEmpty()) {
            String dataHome = env.getOrDefault("XDG_DATA_HOME", "");
            Path base = dataHome.isEmpty() ? Path.of(System.getProperty("user.home"), ".local", "share") : Path.of(dataHome);
            return base.resolve("ksched").resolve("kafka-data").resolve("credentials.json");
        }
        return Path.of(dataDir).resolve("credentials.json");
    }

    static String passwordFromFile(Path file, String username) throws IOException {
        if (!Files.isReadable(file)) {
            throw new IOException("no credentials file at " + file + ": start the broker (ksched kafka start), set "
                    + "KSCHED_CREDENTIALS_FILE, or give KSCHED_SASL_PASSWORD");
        }
        JsonNode password = new ObjectMapper().readTree(file.toFile()).path("users").path(username);
        if (!password.isTextual()) {
            throw new IOException("no password for " + username + " in " + file + ": register the tenant (ksched tenants add)"
                    + " or give KSCHED_SASL_PASSWORD");
        }
        return password.asText();
    }

    /** KSCHED_SCHEMAS_DIR, else the nearest {@code schemas/} above the working directory or the jar. */
    static Path schemasDir(Map<String, String> env) {
        String explicit = env.getOrDefault("KSCHED_SCHEMAS_DIR", "");
        if (!explicit.isEmpty()) {
            return Path.of(explicit);
        }
        Path jar;
        try {
            jar = Path.of(Config.class.getProtectionDomain().getCodeSource().getLocation().toURI()).toAbsolutePath();
        } catch (Exception e) {
            jar = Path.of("").toAbsolutePath();
        }
        for (Path start : new Path[] {Path.of("").toAbsolutePath(), jar}) {
            for (Path p = start; p != null; p = p.getParent()) {
                if (Files.isRegularFile(p.resolve("schemas").resolve("ScheduleCommand.avsc"))) {
                    return p.resolve("schemas");
                }
            }
        }
        throw new IllegalArgumentException("cannot find ksched's schemas/ folder: set KSCHED_SCHEMAS_DIR");
    }

    public String topic(String kind) {
        return namespace + "." + kind + "." + tenant; // contract §2
    }

    /** The consumer-group and transactional-id prefix the tenant's ACLs allow (contract §1). */
    public String groupPrefix() {
        return namespace + ".tenant." + tenant + ".";
    }

    /** The connection and security properties every client of this process shares. */
    public Properties kafka(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("security.protocol", protocol);
        if (protocol.startsWith("SASL")) {
            p.put("sasl.mechanism", mechanism);
            String module = mechanism.equals("PLAIN")
                    ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                    : "org.apache.kafka.common.security.scram.ScramLoginModule";
            p.put("sasl.jaas.config", module + " required username=\"" + jaasEscape(username)
                    + "\" password=\"" + jaasEscape(password) + "\";");
        }
        return p;
    }

    private static String jaasEscape(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"");
    }
}
