/* Multi-buffer MD5: up to 8 independent MD5 streams advanced together, one 32-bit lane of an
 * AVX2 or AVX-512VL register each (gateway/s3/md5lanes.py brings the streams together).
 *
 * MD5 is a chain of dependent steps, so one stream leaves most of a core idle: 8 streams in
 * the lanes of one register cost about what one costs alone. The block function is RFC 1321's;
 * one stream alone, or a CPU without AVX2, runs it in general registers. x86-64 only: where
 * this does not build, md5lanes.py uses hashlib.
 *
 * blocks(states, datas, nblocks[, kernel[, stop]]) -> blocks done: states[i] is a writable
 * 16-byte buffer (the four state words, little-endian), datas[i] a buffer of at least
 * nblocks * 64 bytes; the GIL is released. kernel: "" picks the best this CPU runs; "scalar",
 * "avx2", "avx512" (the tests). stop: a writable buffer whose first byte, once set, ends the
 * call after the piece of PIECE blocks in hand (another stream wants a lane); one piece at
 * least is always done.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define LANES 8
#define PIECE 256

static const uint32_t K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391};

static inline uint32_t rotl(uint32_t x, int s) { return (x << s) | (x >> (32 - s)); }

/* One stream in general registers: fewer than two streams, or a CPU without AVX2. */
#define SF(b, c, d) ((d) ^ ((b) & ((c) ^ (d))))
#define SG(b, c, d) ((c) ^ ((d) & ((b) ^ (c))))
#define SH(b, c, d) ((b) ^ (c) ^ (d))
#define SI(b, c, d) ((c) ^ ((b) | ~(d)))
#define SSTEP(fn, a, b, c, d, i, g, s) a = b + rotl(a + fn(b, c, d) + K[i] + m[g], s);
#define SROUND(fn, i, g0, g1, g2, g3, s0, s1, s2, s3)                                        \
    SSTEP(fn, a, b, c, d, i, g0, s0)                                                         \
    SSTEP(fn, d, a, b, c, i + 1, g1, s1)                                                     \
    SSTEP(fn, c, d, a, b, i + 2, g2, s2)                                                     \
    SSTEP(fn, b, c, d, a, i + 3, g3, s3)

static void md5_x1(uint32_t *st, const uint8_t *p, Py_ssize_t nblocks)
{
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3], m[16];
    for (; nblocks > 0; nblocks--, p += 64) {
        memcpy(m, p, 64); /* x86: little-endian, as MD5 wants */
        uint32_t a0 = a, b0 = b, c0 = c, d0 = d;
        SROUND(SF, 0, 0, 1, 2, 3, 7, 12, 17, 22)
        SROUND(SF, 4, 4, 5, 6, 7, 7, 12, 17, 22)
        SROUND(SF, 8, 8, 9, 10, 11, 7, 12, 17, 22)
        SROUND(SF, 12, 12, 13, 14, 15, 7, 12, 17, 22)
        SROUND(SG, 16, 1, 6, 11, 0, 5, 9, 14, 20)
        SROUND(SG, 20, 5, 10, 15, 4, 5, 9, 14, 20)
        SROUND(SG, 24, 9, 14, 3, 8, 5, 9, 14, 20)
        SROUND(SG, 28, 13, 2, 7, 12, 5, 9, 14, 20)
        SROUND(SH, 32, 5, 8, 11, 14, 4, 11, 16, 23)
        SROUND(SH, 36, 1, 4, 7, 10, 4, 11, 16, 23)
        SROUND(SH, 40, 13, 0, 3, 6, 4, 11, 16, 23)
        SROUND(SH, 44, 9, 12, 15, 2, 4, 11, 16, 23)
        SROUND(SI, 48, 0, 7, 14, 5, 6, 10, 15, 21)
        SROUND(SI, 52, 12, 3, 10, 1, 6, 10, 15, 21)
        SROUND(SI, 56, 8, 15, 6, 13, 6, 10, 15, 21)
        SROUND(SI, 60, 4, 11, 2, 9, 6, 10, 15, 21)
        a += a0;
        b += b0;
        c += c0;
        d += d0;
    }
    st[0] = a;
    st[1] = b;
    st[2] = c;
    st[3] = d;
}

#define V __m256i
#define ADD(x, y) _mm256_add_epi32(x, y)
#define XOR(x, y) _mm256_xor_si256(x, y)
#define AND(x, y) _mm256_and_si256(x, y)
#define OR(x, y) _mm256_or_si256(x, y)
#define STEP(fn, a, b, c, d, i, g, s)                                                        \
    a = ADD(a, ADD(fn(b, c, d), ADD(m[g], _mm256_set1_epi32((int)K[i]))));                   \
    a = ADD(ROTL(a, s), b);

/* AVX2: rotations as two shifts and an OR; the round functions as two or three operations. */
#define X8_NAME md5_x8_avx2
#define X8_TARGET __attribute__((target("avx2")))
#define X8_LOCALS const V ones = _mm256_set1_epi32(-1);
#define X8_LOAD load8_avx2
#define ROTL(x, s) OR(_mm256_slli_epi32(x, s), _mm256_srli_epi32(x, 32 - (s)))
#define FF(b, c, d) XOR(d, AND(b, XOR(c, d)))
#define GG(b, c, d) XOR(c, AND(d, XOR(b, c)))
#define HH(b, c, d) XOR(XOR(b, c), d)
#define II(b, c, d) XOR(c, OR(b, XOR(d, ones)))
#include "md5lanes_x8.h"
#undef X8_NAME
#undef X8_TARGET
#undef X8_LOCALS
#undef X8_LOAD
#undef ROTL
#undef FF
#undef GG
#undef HH
#undef II

/* AVX-512VL on the same 8 lanes: one rotate and one ternary-logic operation each. */
#define X8_NAME md5_x8_avx512
#define X8_TARGET __attribute__((target("avx2,avx512f,avx512vl")))
#define X8_LOCALS
#define X8_LOAD load8_avx512
#define ROTL(x, s) _mm256_rol_epi32(x, s)
#define FF(b, c, d) _mm256_ternarylogic_epi32(b, c, d, 0xCA)
#define GG(b, c, d) _mm256_ternarylogic_epi32(d, b, c, 0xCA)
#define HH(b, c, d) _mm256_ternarylogic_epi32(b, c, d, 0x96)
#define II(b, c, d) _mm256_ternarylogic_epi32(b, c, d, 0x39)
#include "md5lanes_x8.h"

static int have_avx2, have_avx512;

static PyObject *blocks(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *states, *datas;
    Py_ssize_t nblocks;
    const char *kernel = "";
    PyObject *stop_obj = NULL;
    if (!PyArg_ParseTuple(args, "OOn|sO", &states, &datas, &nblocks, &kernel, &stop_obj))
        return NULL;
    int avx2 = have_avx2, avx512 = have_avx512;
    if (*kernel) {
        int known = !strcmp(kernel, "scalar") || !strcmp(kernel, "avx2") ||
                    !strcmp(kernel, "avx512");
        avx2 = !strcmp(kernel, "avx2") || !strcmp(kernel, "avx512");
        avx512 = !strcmp(kernel, "avx512");
        if (!known || (avx2 && !have_avx2) || (avx512 && !have_avx512)) {
            PyErr_Format(PyExc_ValueError, "no %s kernel on this CPU", kernel);
            return NULL;
        }
    }
    if (!PyList_Check(states) || !PyList_Check(datas)) {
        PyErr_SetString(PyExc_TypeError, "states and datas must be lists");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(states);
    if (n != PyList_GET_SIZE(datas) || n < 1 || n > LANES) {
        PyErr_SetString(PyExc_ValueError, "1 to 8 states, one data buffer each");
        return NULL;
    }
    if (nblocks < 0 || nblocks > PY_SSIZE_T_MAX / 64) {
        PyErr_SetString(PyExc_ValueError, "nblocks out of range");
        return NULL;
    }
    Py_buffer sb[LANES], db[LANES], stop = {0};
    if (stop_obj != NULL && stop_obj != Py_None) {
        if (PyObject_GetBuffer(stop_obj, &stop, PyBUF_WRITABLE) < 0)
            return NULL;
        if (stop.len < 1) {
            PyBuffer_Release(&stop);
            PyErr_SetString(PyExc_ValueError, "stop is at least one byte");
            return NULL;
        }
    }
    Py_ssize_t got = 0, done = 0;
    int ok = 1;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(states, got), &sb[got], PyBUF_WRITABLE) < 0) {
            ok = 0;
            break;
        }
        if (PyObject_GetBuffer(PyList_GET_ITEM(datas, got), &db[got], PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&sb[got]);
            ok = 0;
            break;
        }
        if (sb[got].len != 16 || db[got].len < nblocks * 64) {
            PyErr_SetString(PyExc_ValueError, "a state is 16 bytes; data nblocks * 64");
            PyBuffer_Release(&sb[got]);
            PyBuffer_Release(&db[got]);
            ok = 0;
            break;
        }
    }
    if (ok && nblocks > 0) {
        uint32_t spare[LANES][4];
        uint32_t *st[LANES];
        const uint8_t *p[LANES];
        for (Py_ssize_t l = 0; l < n; l++) {
            st[l] = (uint32_t *)sb[l].buf;
            p[l] = (const uint8_t *)db[l].buf;
        }
        volatile const unsigned char *flag = stop.buf;
        int wide = avx2 && n > 1;
        /* idle lanes hash lane 0's data again into a scratch state */
        for (Py_ssize_t l = n; l < LANES; l++) {
            memcpy(spare[l], st[0], 16);
            st[l] = spare[l];
            p[l] = p[0];
        }
        Py_BEGIN_ALLOW_THREADS
        do { /* one piece at least: a stop set before the call still lets it progress */
            Py_ssize_t k = flag != NULL && nblocks - done > PIECE ? PIECE : nblocks - done;
            if (wide) {
                (avx512 ? md5_x8_avx512 : md5_x8_avx2)(st, p, k);
            } else {
                for (Py_ssize_t l = 0; l < n; l++)
                    md5_x1(st[l], p[l], k);
            }
            for (int l = 0; l < LANES; l++)
                p[l] += 64 * k;
            done += k;
        } while (done < nblocks && !(flag != NULL && *flag));
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t l = 0; l < got; l++) {
        PyBuffer_Release(&sb[l]);
        PyBuffer_Release(&db[l]);
    }
    if (stop.obj != NULL)
        PyBuffer_Release(&stop);
    if (!ok)
        return NULL;
    return PyLong_FromSsize_t(done);
}

static PyObject *simd(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(have_avx512 ? "avx512" : have_avx2 ? "avx2" : "");
}

static PyMethodDef methods[] = {
    {"blocks", blocks, METH_VARARGS,
     "blocks(states, datas, nblocks[, kernel[, stop]]) -> blocks done: advance up to 8 MD5s"},
    {"simd", simd, METH_NOARGS, "the vector instruction set of the lanes, or ''"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_md5lanes", NULL, -1, methods};

PyMODINIT_FUNC PyInit__md5lanes(void)
{
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
    have_avx512 = have_avx2 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512vl");
    return PyModule_Create(&module);
}
