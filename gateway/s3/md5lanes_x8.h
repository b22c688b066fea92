/* The 8-lane MD5 block function, compiled once per instruction set (md5lanes.c includes this
 * file with X8_NAME, X8_TARGET, X8_LOCALS, X8_LOAD and the step macros defined). */
/* Word w of the 8 lanes' blocks into m[w]: an 8x8 transpose of 32-bit words, twice. */
X8_TARGET static inline void X8_LOAD(V m[16], const uint8_t *p[LANES])
{
    for (int half = 0; half < 2; half++) {
        V r[8], t[8], u[8];
        for (int l = 0; l < 8; l++)
            r[l] = _mm256_loadu_si256((const V *)(p[l] + 32 * half));
        for (int l = 0; l < 8; l += 2) {
            t[l] = _mm256_unpacklo_epi32(r[l], r[l + 1]);
            t[l + 1] = _mm256_unpackhi_epi32(r[l], r[l + 1]);
        }
        for (int l = 0; l < 8; l += 4) {
            u[l] = _mm256_unpacklo_epi64(t[l], t[l + 2]);
            u[l + 1] = _mm256_unpackhi_epi64(t[l], t[l + 2]);
            u[l + 2] = _mm256_unpacklo_epi64(t[l + 1], t[l + 3]);
            u[l + 3] = _mm256_unpackhi_epi64(t[l + 1], t[l + 3]);
        }
        /* u[0..3]: words 0,1,2,3 (low 128: lanes 0-3 of r0..r3, high: words 4-7) */
        V *out = m + 8 * half;
        out[0] = _mm256_permute2x128_si256(u[0], u[4], 0x20);
        out[1] = _mm256_permute2x128_si256(u[1], u[5], 0x20);
        out[2] = _mm256_permute2x128_si256(u[2], u[6], 0x20);
        out[3] = _mm256_permute2x128_si256(u[3], u[7], 0x20);
        out[4] = _mm256_permute2x128_si256(u[0], u[4], 0x31);
        out[5] = _mm256_permute2x128_si256(u[1], u[5], 0x31);
        out[6] = _mm256_permute2x128_si256(u[2], u[6], 0x31);
        out[7] = _mm256_permute2x128_si256(u[3], u[7], 0x31);
    }
}

X8_TARGET static void X8_NAME(uint32_t *st[LANES], const uint8_t *p[LANES], Py_ssize_t nblocks)
{
    X8_LOCALS
    V a = _mm256_setr_epi32((int)st[0][0], (int)st[1][0], (int)st[2][0], (int)st[3][0],
                            (int)st[4][0], (int)st[5][0], (int)st[6][0], (int)st[7][0]);
    V b = _mm256_setr_epi32((int)st[0][1], (int)st[1][1], (int)st[2][1], (int)st[3][1],
                            (int)st[4][1], (int)st[5][1], (int)st[6][1], (int)st[7][1]);
    V c = _mm256_setr_epi32((int)st[0][2], (int)st[1][2], (int)st[2][2], (int)st[3][2],
                            (int)st[4][2], (int)st[5][2], (int)st[6][2], (int)st[7][2]);
    V d = _mm256_setr_epi32((int)st[0][3], (int)st[1][3], (int)st[2][3], (int)st[3][3],
                            (int)st[4][3], (int)st[5][3], (int)st[6][3], (int)st[7][3]);
    const uint8_t *q[LANES];
    memcpy(q, p, sizeof q);
    for (Py_ssize_t n = 0; n < nblocks; n++) {
        V m[16];
        X8_LOAD(m, q);
        for (int l = 0; l < LANES; l++)
            q[l] += 64;
        V a0 = a, b0 = b, c0 = c, d0 = d;
        for (int i = 0; i < 16; i += 4) {
            STEP(FF, a, b, c, d, i, i, 7);
            STEP(FF, d, a, b, c, i + 1, i + 1, 12);
            STEP(FF, c, d, a, b, i + 2, i + 2, 17);
            STEP(FF, b, c, d, a, i + 3, i + 3, 22);
        }
        for (int i = 16; i < 32; i += 4) {
            STEP(GG, a, b, c, d, i, (5 * i + 1) & 15, 5);
            STEP(GG, d, a, b, c, i + 1, (5 * i + 6) & 15, 9);
            STEP(GG, c, d, a, b, i + 2, (5 * i + 11) & 15, 14);
            STEP(GG, b, c, d, a, i + 3, (5 * i + 16) & 15, 20);
        }
        for (int i = 32; i < 48; i += 4) {
            STEP(HH, a, b, c, d, i, (3 * i + 5) & 15, 4);
            STEP(HH, d, a, b, c, i + 1, (3 * i + 8) & 15, 11);
            STEP(HH, c, d, a, b, i + 2, (3 * i + 11) & 15, 16);
            STEP(HH, b, c, d, a, i + 3, (3 * i + 14) & 15, 23);
        }
        for (int i = 48; i < 64; i += 4) {
            STEP(II, a, b, c, d, i, (7 * i) & 15, 6);
            STEP(II, d, a, b, c, i + 1, (7 * i + 7) & 15, 10);
            STEP(II, c, d, a, b, i + 2, (7 * i + 14) & 15, 15);
            STEP(II, b, c, d, a, i + 3, (7 * i + 21) & 15, 21);
        }
        a = ADD(a, a0);
        b = ADD(b, b0);
        c = ADD(c, c0);
        d = ADD(d, d0);
    }
    uint32_t out[4][LANES];
    _mm256_storeu_si256((V *)out[0], a);
    _mm256_storeu_si256((V *)out[1], b);
    _mm256_storeu_si256((V *)out[2], c);
    _mm256_storeu_si256((V *)out[3], d);
    for (int l = 0; l < LANES; l++)
        for (int w = 0; w < 4; w++)
            st[l][w] = out[w][l];
}

