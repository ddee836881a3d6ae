/* The x86 dequantizing kernels: AVX2 + FMA + F16C (AVX-512 CPUs run these too), compiled with
 * -ffp-contract=off: every weight is decoded eight at a time with dequant_scalar.c's float32 operations and
 * equals gguf's bit for bit. One exception in form, not in value: Q4_1's and Q5_1's q * d + m and the
 * K-quants' q * (d * sc) - dmin * m are one FMA each, because their products are exact in float32 (a float16
 * scale has 11 significant bits, sc and m 6, q 5 at most: 22 bits < 24, no underflow), so the add's rounding is the
 * only one either way (tests/kernels/test_cpu_dequant_matmul.py runs every finite float16 scale). On this
 * Zen 1 the FMA pipes bound the decode: T = 1 Q4_1 1536 x 576 took 283 us a call unfused, 231 us fused.
 *
 * Every row of x sums in one order whatever the tile: two accumulators, the row's vectors of 8 values
 * alternating between them, then a0 + a1 and a fixed horizontal sum; so a row gives the same bits alone or
 * in a batch. Up to FUSED_T rows of x (decode): a weight row's blocks are decoded in registers and met by
 * those rows at once. More rows (up to DQ_T, a tile): CHUNK values of a weight row are decoded into an L1
 * buffer once, then the tile's rows run over them six at a time (one load of w feeds six FMAs: 0.57 ns an
 * FMA here, 0.75 at four). Single thread, Q4_1 1536 x 576: 0.24 / 0.15 / 0.11 ns a weight and row at 1 / 2 /
 * 4 rows (registers), 0.10 / 0.09 at 8 / 12 (buffer; Zen 1 stores 256 bits in two cycles). */
#include <immintrin.h>

#include "quant_matmul.h"

#define INLINE static inline __attribute__((always_inline))

enum { CHUNK = 512 };      /* values decoded at a time for a tile: a multiple of every block */
enum { FUSED, STORE };     /* what a walker does with each 32 decoded values */
enum { FUSED_T = 4 };      /* rows of x met by the decoded registers at once; more rows: the L1 buffer */

INLINE float f16(uint16_t h) { return _cvtsh_ss(h); }

INLINE __m256 f16x8(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)h)); }  /* broadcast, converted */

INLINE __m256i u8x8(const uint8_t *p) {  /* 8 bytes zero-extended to int32 lanes */
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

INLINE __m256 to_f32(__m256i v) { return _mm256_cvtepi32_ps(v); }

/* values at..at+31 of the row, v[4]: FUSED adds v[j] * x[t * ldx + at + 8j..] into acc[t][j % 2] for the
 * nt rows t of x; STORE writes them to out[at..] */
INLINE void emit(const int mode, const __m256 *v, int64_t at, const float *x, int64_t ldx, const int nt,
                 __m256 (*acc)[2], float *out) {
    for (int j = 0; j < 4; j++) {
        if (mode == STORE) {
            _mm256_store_ps(out + at + 8 * j, v[j]);
            continue;
        }
        for (int t = 0; t < nt; t++)
            acc[t][j % 2] = _mm256_fmadd_ps(v[j], _mm256_loadu_ps(x + t * ldx + at + 8 * j), acc[t][j % 2]);
    }
}

/* Each walk_<type>(w, v0, len, mode, x, ldx, nt, acc, out): values v0 .. v0 + len (whole blocks) of the row
 * at w, decoded and emitted at 0 .. len (x and out start at value v0) */

INLINE void walk_q8_0(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q8_0 *blk = (const block_q8_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256 v[4];
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk->qs + 8 * j)));
            v[j] = _mm256_mul_ps(to_f32(q), d);
        }
        emit(mode, v, at, x, ldx, nt, acc, out);
    }
}

INLINE void nibbles32(const uint8_t *qs, __m256i *q) {  /* 16 bytes -> values 0-7, 8-15 (low nibbles), 16-31 */
    const __m256i a = u8x8(qs), b = u8x8(qs + 8), mask = _mm256_set1_epi32(0xF);
    q[0] = _mm256_and_si256(a, mask), q[1] = _mm256_and_si256(b, mask);
    q[2] = _mm256_srli_epi32(a, 4), q[3] = _mm256_srli_epi32(b, 4);
}

INLINE void walk_q4_0(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q4_0 *blk = (const block_q4_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(to_f32(_mm256_sub_epi32(q[j], _mm256_set1_epi32(8))), d);
        emit(mode, v, at, x, ldx, nt, acc, out);
    }
}

INLINE void walk_q4_1(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q4_1 *blk = (const block_q4_1 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        uint32_t dm;  /* d and m side by side: one conversion */
        memcpy(&dm, &blk->d, 4);
        const __m128 dm_f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
        const __m256 d = _mm256_broadcastss_ps(dm_f), m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm_f));
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_fmadd_ps(to_f32(q[j]), d, m);
        emit(mode, v, at, x, ldx, nt, acc, out);
    }
}

/* Q5_*: q[j] (values 8j .. 8j + 7, from nibbles32) |= their fifth bits (bit i of the little-endian uint32 qh:
 * value i's) as 16 */
INLINE void fifth_bits(const uint8_t *qh, __m256i *q) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i all = _mm256_set1_epi32((int)bits), one = _mm256_set1_epi32(1);
    for (int j = 0; j < 4; j++) {
        const __m256i at = _mm256_setr_epi32(8 * j, 8 * j + 1, 8 * j + 2, 8 * j + 3, 8 * j + 4, 8 * j + 5, 8 * j + 6,
                                             8 * j + 7);
        q[j] = _mm256_or_si256(q[j], _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(all, at), one), 4));
    }
}

INLINE void walk_q5_0(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q5_0 *blk = (const block_q5_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        fifth_bits(blk->qh, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(to_f32(_mm256_sub_epi32(q[j], _mm256_set1_epi32(16))), d);
        emit(mode, v, at, x, ldx, nt, acc, out);
    }
}

INLINE void walk_q5_1(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q5_1 *blk = (const block_q5_1 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        uint32_t dm;  /* d and m side by side: one conversion */
        memcpy(&dm, &blk->d, 4);
        const __m128 dm_f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
        const __m256 d = _mm256_broadcastss_ps(dm_f), m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm_f));
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        fifth_bits(blk->qh, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_fmadd_ps(to_f32(q[j]), d, m);
        emit(mode, v, at, x, ldx, nt, acc, out);
    }
}

/* Q4_K / Q5_K superblock (qh NULL for Q4_K): sub-blocks 2c and 2c + 1 take the low and high nibbles of
 * qs[32c ..], bit j of qh[i] is bit 4 of value i of sub-block j; w = q * (d * sc) - dmin * m */
INLINE void superblock_k(const uint8_t *scales, float d, float dmin, const uint8_t *qs, const uint8_t *qh,
                         int64_t at, const int mode, const float *x, int64_t ldx, const int nt,
                         __m256 (*acc)[2], float *out) {
    const __m256i mask = _mm256_set1_epi32(0xF), one = _mm256_set1_epi32(1);
    uint32_t b0, b1, b2;  /* scale_min_k4's layout (quant_matmul.h), 4 sub-blocks at a time */
    memcpy(&b0, scales, 4), memcpy(&b1, scales + 4, 4), memcpy(&b2, scales + 8, 4);
    const uint32_t sc_lo = b0 & 0x3f3f3f3fu, m_lo = b1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (b2 & 0x0f0f0f0fu) | ((b0 >> 6) & 0x03030303u) << 4;
    const uint32_t m_hi = ((b2 >> 4) & 0x0f0f0f0fu) | ((b1 >> 6) & 0x03030303u) << 4;
    float sub_scale[8], sub_min[8];  /* d * sc_j and -(dmin * m_j), broadcast from memory below */
    const __m256 sc = to_f32(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo)));
    const __m256 m = to_f32(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo)));
    _mm256_storeu_ps(sub_scale, _mm256_mul_ps(sc, _mm256_set1_ps(d)));
    _mm256_storeu_ps(sub_min, _mm256_mul_ps(m, _mm256_set1_ps(-dmin)));
    __m256i high[4];
    for (int i = 0; i < 4 && qh != NULL; i++) high[i] = u8x8(qh + 8 * i);
    for (int c = 0; c < 4; c++) {
        __m256i bytes[4];
        for (int i = 0; i < 4; i++) bytes[i] = u8x8(qs + 32 * c + 8 * i);
        for (int j = 2 * c; j < 2 * c + 2; j++) {
            const __m256 scale = _mm256_broadcast_ss(sub_scale + j), minimum = _mm256_broadcast_ss(sub_min + j);
            __m256 v[4];
            for (int i = 0; i < 4; i++) {
                __m256i q = j % 2 ? _mm256_srli_epi32(bytes[i], 4) : _mm256_and_si256(bytes[i], mask);
                if (qh != NULL)
                    q = _mm256_or_si256(q, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(high[i], j), one), 4));
                v[i] = _mm256_fmadd_ps(to_f32(q), scale, minimum);  /* q * scale is exact: see the top */
            }
            emit(mode, v, at + j * QK, x, ldx, nt, acc, out);
        }
    }
}

INLINE void walk_q4_k(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q4_k *blk = (const block_q4_k *)w + v0 / QK_K;
    for (int64_t at = 0; at < len; at += QK_K, blk++)
        superblock_k(blk->scales, f16(blk->d), f16(blk->dmin), blk->qs, NULL, at, mode, x, ldx, nt, acc, out);
}

INLINE void walk_q5_k(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q5_k *blk = (const block_q5_k *)w + v0 / QK_K;
    for (int64_t at = 0; at < len; at += QK_K, blk++)
        superblock_k(blk->scales, f16(blk->d), f16(blk->dmin), blk->qs, blk->qh, at, mode, x, ldx, nt, acc, out);
}

/* Q6_K: sub-block j = 4h + s takes its low 4 bits from ql[h*64 + (s%2)*32 ..] (high nibbles for s >= 2),
 * its high 2 bits from qh[h*32 ..] >> 2s; minus 32; times d * the int8 scale of each 16 values */
INLINE void walk_q6_k(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                      const int nt, __m256 (*acc)[2], float *out) {
    const block_q6_k *blk = (const block_q6_k *)w + v0 / QK_K;
    const __m256i mask = _mm256_set1_epi32(0xF), three = _mm256_set1_epi32(3), offset = _mm256_set1_epi32(32);
    for (int64_t at = 0; at < len; at += QK_K, blk++) {
        float scales[16];  /* d * scale of each 16 values, broadcast from memory below */
        for (int i = 0; i < 2; i++)
            _mm256_storeu_ps(scales + 8 * i, _mm256_mul_ps(to_f32(_mm256_cvtepi8_epi32(
                _mm_loadl_epi64((const __m128i *)(blk->scales + 8 * i)))), _mm256_set1_ps(f16(blk->d))));
        for (int h = 0; h < 2; h++) {
            __m256i high[4];
            for (int i = 0; i < 4; i++) high[i] = u8x8(blk->qh + h * 32 + 8 * i);
            for (int s = 0; s < 4; s++) {
                const int j = 4 * h + s;
                const __m256 scale_lo = _mm256_broadcast_ss(scales + 2 * j);
                const __m256 scale_hi = _mm256_broadcast_ss(scales + 2 * j + 1);
                __m256 v[4];
                for (int i = 0; i < 4; i++) {
                    const __m256i bytes = u8x8(blk->ql + h * 64 + (s % 2) * 32 + 8 * i);
                    const __m256i lo = s >= 2 ? _mm256_srli_epi32(bytes, 4) : _mm256_and_si256(bytes, mask);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(high[i], 2 * s), three);
                    const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), offset);
                    v[i] = _mm256_mul_ps(to_f32(q), i < 2 ? scale_lo : scale_hi);
                }
                emit(mode, v, at + j * QK, x, ldx, nt, acc, out);
            }
        }
    }
}

INLINE void walk_iq4_xs(const uint8_t *w, int64_t v0, int64_t len, const int mode, const float *x, int64_t ldx,
                        const int nt, __m256 (*acc)[2], float *out) {
    const block_iq4_xs *blk = (const block_iq4_xs *)w + v0 / QK_K;
    const __m128i values = _mm_loadu_si128((const __m128i *)IQ4_VALUES), mask = _mm_set1_epi8(0xF);
    for (int64_t at = 0; at < len; at += QK_K, blk++) {
        int32_t ls[8];
        float scales[8];  /* d * (ls - 32) of each sub-block, broadcast from memory below */
        for (int j = 0; j < 8; j++) ls[j] = iq4_xs_scale(blk, j);
        const __m256 ls_f = to_f32(_mm256_loadu_si256((const __m256i *)ls));
        _mm256_storeu_ps(scales, _mm256_mul_ps(ls_f, _mm256_set1_ps(f16(blk->d))));
        for (int j = 0; j < 8; j++) {
            const __m256 scale = _mm256_broadcast_ss(scales + j);
            const __m128i codes = _mm_loadu_si128((const __m128i *)(blk->qs + 16 * j));
            const __m128i lo = _mm_shuffle_epi8(values, _mm_and_si128(codes, mask));  /* values 0-15, int8 */
            const __m128i hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(codes, 4), mask));
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            __m256 v[4];
            for (int i = 0; i < 4; i++) v[i] = _mm256_mul_ps(to_f32(_mm256_cvtepi8_epi32(parts[i])), scale);
            emit(mode, v, at + j * QK, x, ldx, nt, acc, out);
        }
    }
}

INLINE float reduce(const __m256 *acc) {  /* a0 + a1, then the 8 lanes in a fixed order */
    const __m256 v = _mm256_add_ps(acc[0], acc[1]);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* acc[t] += the decoded values w [len] times row t of x (rows ldx apart), t < nr <= 6, in the order FUSED
 * adds them: one load of w feeds nr FMAs (12 accumulators and w fill the 16 registers) */
INLINE void dot_rows(const float *w, int64_t len, const float *x, int64_t ldx, const int nr, __m256 (*acc)[2]) {
    __m256 a[6][2];
    for (int t = 0; t < nr; t++) a[t][0] = acc[t][0], a[t][1] = acc[t][1];
    for (int64_t i = 0; i < len; i += 16) {
        for (int j = 0; j < 2; j++) {
            const __m256 wv = _mm256_load_ps(w + i + 8 * j);
            for (int t = 0; t < nr; t++)
                a[t][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * ldx + i + 8 * j), a[t][j]);
        }
    }
    for (int t = 0; t < nr; t++) acc[t][0] = a[t][0], acc[t][1] = a[t][1];
}

/* rows of the tile x [nt, k], 2 <= nt <= DQ_T, over one weight row decoded CHUNK values at a time */
#define TILE(name)                                                                                            \
    static void tile_##name(const uint8_t *w, const float *x, int64_t k, int nt, float *y, int64_t ldy) {     \
        __m256 acc[DQ_T][2];                                                                                  \
        _Alignas(32) float wf[CHUNK];                                                                         \
        for (int t = 0; t < nt; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();                             \
        for (int64_t c0 = 0; c0 < k; c0 += CHUNK) {                                                           \
            const int64_t len = k - c0 < CHUNK ? k - c0 : CHUNK;                                              \
            walk_##name(w, c0, len, STORE, NULL, 0, 0, NULL, wf);                                             \
            for (int t = 0; t < nt; t += 6) {                                                                 \
                const float *xt = x + t * k + c0;                                                             \
                switch (nt - t) {                                                                             \
                case 1: dot_rows(wf, len, xt, k, 1, acc + t); break;                                          \
                case 2: dot_rows(wf, len, xt, k, 2, acc + t); break;                                          \
                case 3: dot_rows(wf, len, xt, k, 3, acc + t); break;                                          \
                case 4: dot_rows(wf, len, xt, k, 4, acc + t); break;                                          \
                case 5: dot_rows(wf, len, xt, k, 5, acc + t); break;                                          \
                default: dot_rows(wf, len, xt, k, 6, acc + t); break;                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
        for (int t = 0; t < nt; t++) y[t * ldy] = reduce(acc[t]);                                             \
    }

#define ROWS(name)                                                                                            \
    TILE(name)                                                                                                \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k,      \
                            int nt, float *y, int64_t ldy) {                                                  \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            const uint8_t *wr = w + r * row_bytes;                                                            \
            if (nt > FUSED_T) {                                                                               \
                tile_##name(wr, x, k, nt, y + r, ldy);                                                        \
                continue;                                                                                     \
            }                                                                                                 \
            __m256 acc[FUSED_T][2];                                                                           \
            for (int t = 0; t < nt; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();                         \
            switch (nt) {                                                                                     \
            case 1: walk_##name(wr, 0, k, FUSED, x, k, 1, acc, NULL); break;                                  \
            case 2: walk_##name(wr, 0, k, FUSED, x, k, 2, acc, NULL); break;                                  \
            case 3: walk_##name(wr, 0, k, FUSED, x, k, 3, acc, NULL); break;                                  \
            default: walk_##name(wr, 0, k, FUSED, x, k, 4, acc, NULL); break;                                 \
            }                                                                                                 \
            for (int t = 0; t < nt; t++) y[t * ldy + r] = reduce(acc[t]);                                     \
        }                                                                                                     \
    }
QMM_TYPES(QMM_ROWS)

void strata_dqmm_table_avx2(dq_rows_fn table[NUM_TYPES]) {
    QMM_TYPES(QMM_TABLE_ENTRY)
}
