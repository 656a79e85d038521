package dev.ksched.example;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.bouncycastle.crypto.digests.Blake2bDigest;

/**
 * The identifiers of docs/contract.md §5: BLAKE2b, 16-byte digest, a {@code person} tag, over
 * length-prefixed UTF-8 and big-endian integers; 32 lowercase hex characters.
 */
public final class Ids {
    private static final byte[] SID = "ksched.sid.v1".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] OCC = "ksched.occ.v1".getBytes(StandardCharsets.US_ASCII);

    private Ids() {}

    /** The id of a keyed create: blake2b(u32be(len(t)) || t || u32be(len(key)) || key, person "ksched.sid.v1"). */
    public static String scheduleId(String tenant, String idempotencyKey) {
        byte[] t = tenant.getBytes(StandardCharsets.UTF_8);
        byte[] k = idempotencyKey.getBytes(StandardCharsets.UTF_8);
        ByteBuffer data = ByteBuffer.allocate(8 + t.length + k.length); // big-endian by default
        data.putInt(t.length).put(t).putInt(k.length).put(k);
        return blake2b(SID, data.array());
    }

    /** blake2b(u32be(len(sid)) || sid || i64be(version) || i64be(scheduled_for epoch seconds), person "ksched.occ.v1"). */
    public static String occurrenceId(String scheduleId, long version, long scheduledForEpochSeconds) {
        byte[] s = scheduleId.getBytes(StandardCharsets.UTF_8);
        ByteBuffer data = ByteBuffer.allocate(4 + s.length + 16);
        data.putInt(s.length).put(s).putLong(version).putLong(scheduledForEpochSeconds);
        return blake2b(OCC, data.array());
    }

    /**
     * The partition the Java producer picks for a record keyed by {@code key}: with no
     * {@code partitioner.class} set and {@code partitioner.ignore.keys=false} (the defaults), a keyed
     * record goes to {@code BuiltInPartitioner.partitionForKey} = {@code (murmur2(key) & 0x7fffffff) %
     * partitions} (contract §3). Used here only to show the partition; the producer computes it itself.
     */
    public static int partitionFor(String key, int partitions) {
        return BuiltInPartitioner.partitionForKey(key.getBytes(StandardCharsets.UTF_8), partitions);
    }

    /**
     * BLAKE2b with a 16-byte digest and {@code person} as the personalisation parameter. BLAKE2's
     * parameter block holds 16 bytes of it: a shorter tag is padded with zero bytes (what Python's
     * hashlib does); Bouncy Castle wants exactly 16.
     */
    static String blake2b(byte[] person, byte[] data) {
        byte[] personalisation = new byte[16];
        System.arraycopy(person, 0, personalisation, 0, person.length);
        Blake2bDigest digest = new Blake2bDigest(null, 16, null, personalisation);
        digest.update(data, 0, data.length);
        byte[] out = new byte[16];
        digest.doFinal(out, 0);
        return HexFormat.of().formatHex(out);
    }
}
