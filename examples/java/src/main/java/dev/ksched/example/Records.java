package dev.ksched.example;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.message.SchemaStore;

/**
 * The records of docs/contract.md §4: the {@code schemas/*.avsc} files loaded as they are, and Avro
 * single-object encoding ({@code C3 01} + CRC-64-AVRO fingerprint of the writer schema's Parsing
 * Canonical Form, little-endian + the binary body), which Avro's {@code BinaryMessageEncoder} writes.
 *
 * <p>A file may name a type another file defines ({@code "kind": "CommandKind"}), so the files are
 * parsed in dependency order: each file is tried with a fresh parser that knows the types parsed so
 * far, until every file parses (a fresh parser per try: a failed parse leaves no half-defined names).
 * Every released version in {@code schemas/history/} is a self-contained writer schema: the decoders
 * know them all, so a record written by any released version is read with the current schema.
 */
public final class Records {
    private final Map<String, Schema> current = new HashMap<>(); // by full name, e.g. ksched.v1.Occurrence
    private final SchemaStore.Cache writers = new SchemaStore.Cache();

    private Records() {}

    public static Records load(Path schemasDir) throws IOException {
        Records r = new Records();
        List<Path> pending = avscFiles(schemasDir);
        if (pending.isEmpty()) {
            throw new IOException("no .avsc files in " + schemasDir + ": set KSCHED_SCHEMAS_DIR to ksched's schemas/ folder");
        }
        while (!pending.isEmpty()) {
            List<Path> failed = new ArrayList<>();
            String lastError = "";
            for (Path file : pending) {
                Schema.Parser parser = new Schema.Parser().addTypes(r.current.values());
                try {
                    parser.parse(file.toFile());
                    r.current.putAll(parser.getTypes());
                } catch (AvroRuntimeException e) { // SchemaParseException: a name not parsed yet
                    failed.add(file);
                    lastError = file.getFileName() + ": " + e.getMessage();
                }
            }
            if (failed.size() == pending.size()) {
                throw new IOException("cannot load the schemas in " + schemasDir + ": " + lastError);
            }
            pending = failed;
        }
        for (Schema s : r.current.values()) {
            r.writers.addSchema(s);
        }
        Path history = schemasDir.resolve("history");
        if (Files.isDirectory(history)) {
            for (Path file : avscFiles(history)) {
                r.writers.addSchema(new Schema.Parser().parse(file.toFile())); // self-contained
            }
        }
        return r;
    }

    private static List<Path> avscFiles(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.filter(p -> p.getFileName().toString().endsWith(".avsc")).sorted().toList();
        }
    }

    /** The current schema of a record, by its simple name in namespace {@code ksched.v1}. */
    public Schema schema(String name) {
        Schema s = current.get("ksched.v1." + name);
        if (s == null) {
            throw new IllegalArgumentException("no schema ksched.v1." + name + " in the schemas folder");
        }
        return s;
    }

    public GenericData.Record record(String name) {
        return new GenericData.Record(schema(name));
    }

    public byte[] encode(GenericRecord record) {
        try {
            ByteBuffer buf = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), record.getSchema()).encode(record);
            byte[] out = new byte[buf.remaining()];
            buf.get(out);
            return out;
        } catch (IOException e) {
            throw new IllegalStateException("cannot encode " + record.getSchema().getFullName(), e);
        }
    }

    /** Decodes a single-object-encoded value as the current {@code name}; throws on a foreign or broken value. */
    public GenericRecord decode(String name, byte[] value) throws IOException {
        BinaryMessageDecoder<GenericRecord> decoder = new BinaryMessageDecoder<>(GenericData.get(), schema(name), writers);
        return decoder.decode(value);
    }

    /** Every named type of the schemas folder, by full name. */
    public Map<String, Schema> schemas() {
        return Map.copyOf(current);
    }

    /** The 8 bytes after {@code C3 01} in a value written with {@code schema}, as hex (little-endian). */
    public static String fingerprintHex(Schema schema) {
        long fp = SchemaNormalization.parsingFingerprint64(schema);
        return HexFormat.of().formatHex(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fp).array());
    }

    /** A field of a decoded record as a Java string (Avro strings decode as Utf8, enums as symbols). */
    public static String str(GenericRecord r, String field) {
        Object v = r.get(field);
        return v == null ? null : v.toString();
    }

    public static long num(GenericRecord r, String field) {
        return ((Number) r.get(field)).longValue();
    }
}
