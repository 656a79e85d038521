/* The occurrence id (scheduler/domain/ids.py) in C: BLAKE2b (RFC 7693) of its canonical data.
 *
 * occurrence_id_of(schedule_id: str, version: int, scheduled_for: int) -> str is
 *     blake2b(digest_size=16, person=b"ksched.occ.v1",
 *             u32be(len(sid_utf8)) || sid_utf8 || i64be(version) || i64be(scheduled_for)).hexdigest()
 * exactly as ids.py's Python copy computes it with hashlib, which stays the source of truth and
 * the fallback (tests/test_ids_native.py checks the two equal, and both against hashlib).
 *
 * Why C: the processor checks every attempt report's id against this hash, and the Python copy
 * (encode, pack, copy, update, hexdigest: five calls into C) cost 0.63 us of the ~4 us a report
 * costs the processor's main thread (docs/decisions.md). Built by `python -m scheduler.native
 * build` (make install) with $CC or the C compiler Python was built with; no other dependency.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *struct_error; /* struct.error: what the Python copy's pack raises for a bad int */

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
}; /* rounds 10 and 11 use rows 0 and 1 again */

/* The parameter block's person (16 bytes, zero padded): "ksched.occ.v1". */
static const char PERSON[16] = "ksched.occ.v1";
#define DIGEST_BYTES 16
#define BLOCK 128

static uint64_t load64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = (w << 8) | p[i];
    return w;
}

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define G(a, b, c, d, x, y)          \
    do {                             \
        a = a + b + (x);             \
        d = ROTR64(d ^ a, 32);       \
        c = c + d;                   \
        b = ROTR64(b ^ c, 24);       \
        a = a + b + (y);             \
        d = ROTR64(d ^ a, 16);       \
        c = c + d;                   \
        b = ROTR64(b ^ c, 63);       \
    } while (0)

static void compress(uint64_t h[8], const uint8_t *block, uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= t; /* the counter's high word stays 0: the data is far below 2^64 bytes */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = SIGMA[r % 10];
        G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* BLAKE2b-128 with PERSON of data[0:n] (n > 0) into out. */
static void blake2b_person(const uint8_t *data, size_t n, uint8_t out[DIGEST_BYTES]) {
    uint64_t h[8];
    uint8_t last[BLOCK];
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ DIGEST_BYTES; /* digest length, no key, fanout 1, depth 1 */
    h[6] ^= load64((const uint8_t *)PERSON);
    h[7] ^= load64((const uint8_t *)PERSON + 8);
    size_t done = 0;
    while (n - done > BLOCK) { /* every full block but the final one */
        done += BLOCK;
        compress(h, data + done - BLOCK, (uint64_t)done, 0);
    }
    memset(last, 0, BLOCK);
    memcpy(last, data + done, n - done);
    compress(h, last, (uint64_t)n, 1);
    for (int i = 0; i < DIGEST_BYTES; i++) out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

static void put_be(uint8_t *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* An int argument (or one with __index__, as struct.pack takes) as int64, or struct.error as the
 * Python copy's pack raises. */
static int as_i64(PyObject *o, const char *name, long long *out) {
    PyObject *n = PyNumber_Index(o);
    if (n == NULL) {
        PyErr_Clear();
        PyErr_Format(struct_error, "%s: required argument is not an integer", name);
        return -1;
    }
    *out = PyLong_AsLongLong(n);
    Py_DECREF(n);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(struct_error, "%s: argument out of range", name);
        return -1;
    }
    return 0;
}

static PyObject *occurrence_id_of(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    static const char HEX[] = "0123456789abcdef";
    uint8_t stack[512], digest[DIGEST_BYTES];
    long long version, scheduled_for;
    Py_ssize_t n;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "occurrence_id_of() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "occurrence_id_of(): schedule_id must be a str");
        return NULL;
    }
    /* An ASCII string's characters are its UTF-8. Any other is encoded into a bytes object of our
     * own: PyUnicode_AsUTF8AndSize would keep a UTF-8 copy on the string for its lifetime, and the
     * processor passes the schedule ids its entries hold, hundreds of thousands of them. */
    PyObject *encoded = NULL;
    const char *sid;
    if (PyUnicode_READY(args[0]) < 0) return NULL;
    if (PyUnicode_IS_ASCII(args[0])) {
        sid = (const char *)PyUnicode_DATA(args[0]);
        n = PyUnicode_GET_LENGTH(args[0]);
    } else {
        encoded = PyUnicode_AsUTF8String(args[0]); /* a lone surrogate: UnicodeEncodeError, as str.encode */
        if (encoded == NULL) return NULL;
        sid = PyBytes_AS_STRING(encoded);
        n = PyBytes_GET_SIZE(encoded);
    }
    /* then the ints, as the Python copy encodes the id before it packs them */
    if (as_i64(args[1], "version", &version) < 0 || as_i64(args[2], "scheduled_for", &scheduled_for) < 0) {
        Py_XDECREF(encoded);
        return NULL;
    }
    if ((uint64_t)n > 0xffffffffULL) {
        Py_XDECREF(encoded);
        PyErr_SetString(struct_error, "schedule_id: argument out of range");
        return NULL;
    }
    size_t size = 4 + (size_t)n + 16;
    uint8_t *data = size <= sizeof stack ? stack : PyMem_Malloc(size);
    if (data == NULL) {
        Py_XDECREF(encoded);
        return PyErr_NoMemory();
    }
    put_be(data, (uint64_t)n, 4);
    memcpy(data + 4, sid, (size_t)n);
    Py_XDECREF(encoded);
    put_be(data + 4 + n, (uint64_t)version, 8);
    put_be(data + 12 + n, (uint64_t)scheduled_for, 8);
    blake2b_person(data, size, digest);
    if (data != stack) PyMem_Free(data);
    PyObject *hex = PyUnicode_New(2 * DIGEST_BYTES, 127);
    if (hex == NULL) return NULL;
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(hex);
    for (int i = 0; i < DIGEST_BYTES; i++) {
        w[2 * i] = (Py_UCS1)HEX[digest[i] >> 4];
        w[2 * i + 1] = (Py_UCS1)HEX[digest[i] & 15];
    }
    return hex;
}

static PyMethodDef methods[] = {
    {"occurrence_id_of", (PyCFunction)(void (*)(void))occurrence_id_of, METH_FASTCALL,
     "occurrence_id_of(schedule_id, version, scheduled_for) -> str: the occurrence id (scheduler.domain.ids)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ids_native", "The occurrence id's hash in C (scheduler/domain/ids.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__ids_native(void) {
    PyObject *st = PyImport_ImportModule("struct");
    if (st == NULL) return NULL;
    struct_error = PyObject_GetAttrString(st, "error");
    Py_DECREF(st);
    if (struct_error == NULL) return NULL;
    return PyModule_Create(&module);
}
