/* The x86 dequantizing kernels: AVX2 + FMA + F16C (AVX-512 CPUs run these too, but for prompt chunks of
 * DQ_WIDE_MIN+ rows: dequant_avx512.c, which includes this file), compiled with
 * -ffp-contract=off: every weight is decoded eight at a time with dequant_scalar.c's float32 operations and
 * equals gguf's bit for bit. One exception in form, not in value: Q4_1's and Q5_1's q * d + m and the
 * K-quants' q * (d * sc) - dmin * m (Q2_K, Q4_K, Q5_K) are one FMA each, because their products are exact in
 * float32 (a float16 scale has 11 significant bits, sc and m 6, q 5 at most: 22 bits < 24, no underflow), so the
 * add's rounding is the only one either way (tests/kernels/test_cpu_dequant_matmul.py runs every finite float16
 * scale). The i-quants' weights are (d * unit * k) * n (iquant.h), two exact products: gguf's value in any order.
 * On this Zen 1 the FMA pipes bound the decode: T = 1 Q4_1 1536 x 576 took 283 us a call unfused, 231 us fused.
 *
 * Every row of x sums in one order whatever the batch: one accumulator of 8 lanes, the row's vectors of 8
 * values in turn, then a fixed horizontal sum; so a row gives the same bits alone or in a batch. A weight
 * row's blocks are decoded in registers and met there by up to DQ_T rows of x at once (one accumulator
 * each): the decode is paid once per DQ_T rows and nothing is stored. At 1-2 (3-4) rows of x, 4 (2) weight
 * rows go block by block side by side. K is walked whole while the tile's x fits in L1 (X_IN_L1), else in
 * chunks of KCHUNK values over groups of GROUP weight rows, the accumulators parked between chunks (bits
 * unchanged); each weight row is prefetched PREFETCH bytes ahead. Measured on this Zen 1 (2.46 256-bit
 * FMAs/ns a core = 19.7 GMAC/s; bench/results/2026-12-02-cpu-smollm2-batched), one thread, a layer's Q4_1
 * projections x 30 streamed from memory: 8 rows 94.5 -> 78.2 ms against the first version here (two
 * accumulators a row, an L1 buffer of decoded weights past 4 rows), 1 row 31.7 -> 35.0 ms (the float
 * decode bounds one row either way). */
#include <immintrin.h>
#include <stdlib.h>

#include "iquant_simd.h"

#define INLINE static inline __attribute__((always_inline))

enum { KCHUNK = 512 };     /* values of K a pass: a multiple of every block; 8 rows of x are 16 KiB */
enum { X_IN_L1 = 6144 };   /* floats of x (24 KiB) up to which K is walked in one pass */
enum { GROUP = 16 };       /* weight rows a pass over a chunk of K */
enum { PREFETCH = 1024 };   /* bytes ahead in each weight row */

INLINE float f16(uint16_t h) { return _cvtsh_ss(h); }

INLINE __m256 f16x8(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)h)); }  /* broadcast, converted */

INLINE __m256i u8x8(const uint8_t *p) {  /* 8 bytes zero-extended to int32 lanes */
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

INLINE __m256 to_f32(__m256i v) { return _mm256_cvtepi32_ps(v); }

/* values at..at+31 of the row, v[4]: acc[t] += v[j] * x[t * ldx + at + 8j..] for the nt rows t of x; nt == 0
 * stores them instead, each vector of 8 at x + (at + 8j) * ldx (a decoded row for many_<type>, x then being that
 * buffer: ldx 1 a row of its own, 2 interleaved by 8 with another) */
INLINE void emit(const __m256 *v, int64_t at, const float *x, int64_t ldx, const int nt, __m256 *acc) {
    if (nt == 0) {
        for (int j = 0; j < 4; j++) _mm256_storeu_ps((float *)x + (at + 8 * j) * ldx, v[j]);
        return;
    }
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < nt; t++) acc[t] = _mm256_fmadd_ps(v[j], _mm256_loadu_ps(x + t * ldx + at + 8 * j), acc[t]);
}

/* Each walk_<type>(w, v0, len, x, ldx, nt, acc): values v0 .. v0 + len (whole blocks) of the row at w,
 * decoded and emitted at 0 .. len (x starts at value v0) */

INLINE void walk_q8_0(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q8_0 *blk = (const block_q8_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256 v[4];
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk->qs + 8 * j)));
            v[j] = _mm256_mul_ps(to_f32(q), d);
        }
        emit(v, at, x, ldx, nt, acc);
    }
}

INLINE void nibbles32(const uint8_t *qs, __m256i *q) {  /* 16 bytes -> values 0-7, 8-15 (low nibbles), 16-31 */
    const __m256i a = u8x8(qs), b = u8x8(qs + 8), mask = _mm256_set1_epi32(0xF);
    q[0] = _mm256_and_si256(a, mask), q[1] = _mm256_and_si256(b, mask);
    q[2] = _mm256_srli_epi32(a, 4), q[3] = _mm256_srli_epi32(b, 4);
}

INLINE void walk_q4_0(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q4_0 *blk = (const block_q4_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(to_f32(_mm256_sub_epi32(q[j], _mm256_set1_epi32(8))), d);
        emit(v, at, x, ldx, nt, acc);
    }
}

/* IQ4_NL: w = IQ4_VALUES[code] * d, the codes of Q4_0's nibbles looked up by byte shuffles (as IQ4_XS's) */
INLINE void walk_iq4_nl(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                        const int nt, __m256 *acc) {
    const block_iq4_nl *blk = (const block_iq4_nl *)w + v0 / QK;
    const __m128i values = _mm_loadu_si128((const __m128i *)IQ4_VALUES), mask = _mm_set1_epi8(0xF);
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        const __m128i codes = _mm_loadu_si128((const __m128i *)blk->qs);
        const __m128i lo = _mm_shuffle_epi8(values, _mm_and_si128(codes, mask));  /* values 0-15, int8 */
        const __m128i hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(codes, 4), mask));
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        __m256 v[4];
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(to_f32(_mm256_cvtepi8_epi32(parts[j])), d);
        emit(v, at, x, ldx, nt, acc);
    }
}

/* MXFP4: w = 2^(e - 128) * MXFP4_VALUES[code], the codes looked up as IQ4_NL's */
INLINE void walk_mxfp4(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                       const int nt, __m256 *acc) {
    const block_mxfp4 *blk = (const block_mxfp4 *)w + v0 / QK;
    const __m128i values = _mm_loadu_si128((const __m128i *)MXFP4_VALUES), mask = _mm_set1_epi8(0xF);
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = _mm256_set1_ps(mxfp4_scale(blk->e));
        const __m128i codes = _mm_loadu_si128((const __m128i *)blk->qs);
        const __m128i lo = _mm_shuffle_epi8(values, _mm_and_si128(codes, mask));  /* values 0-15, int8 */
        const __m128i hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(codes, 4), mask));
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        __m256 v[4];
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(d, to_f32(_mm256_cvtepi8_epi32(parts[j])));
        emit(v, at, x, ldx, nt, acc);
    }
}

INLINE void walk_q4_1(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
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
        emit(v, at, x, ldx, nt, acc);
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

INLINE void walk_q5_0(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q5_0 *blk = (const block_q5_0 *)w + v0 / QK;
    for (int64_t at = 0; at < len; at += QK, blk++) {
        const __m256 d = f16x8(blk->d);
        __m256i q[4];
        __m256 v[4];
        nibbles32(blk->qs, q);
        fifth_bits(blk->qh, q);
        for (int j = 0; j < 4; j++) v[j] = _mm256_mul_ps(to_f32(_mm256_sub_epi32(q[j], _mm256_set1_epi32(16))), d);
        emit(v, at, x, ldx, nt, acc);
    }
}

INLINE void walk_q5_1(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
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
        emit(v, at, x, ldx, nt, acc);
    }
}

/* Q2_K / Q3_K: q[i] = the 2 low bits of values 8i .. 8i + 7 of sub-blocks 2j, 2j + 1 (32 values, h = j / 4,
 * s = j % 4): bits 2s of qs[32h ..] (quant_matmul.h) */
INLINE void low2x32(const uint8_t *qs, int j, __m256i *q) {
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_and_si256(_mm256_srli_epi32(u8x8(qs + 32 * (j / 4) + 8 * i), 2 * (j % 4)), _mm256_set1_epi32(3));
}

/* Q2_K: w = q * (d * sc) - dmin * m over sub-blocks of 16, one FMA (the product is exact: see the top) */
INLINE void walk_q2_k(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q2_k *blk = (const block_q2_k *)w + v0 / QK_K;
    for (int64_t at = 0; at < len; at += QK_K, blk++) {
        float sub_scale[16], sub_min[16];  /* d * sc_j and -(dmin * m_j), broadcast from memory below */
        const __m256 d = _mm256_set1_ps(f16(blk->d)), minus_dmin = _mm256_set1_ps(-f16(blk->dmin));
        for (int i = 0; i < 2; i++) {
            const __m256i sc_m = u8x8(blk->scales + 8 * i);
            const __m256i sc = _mm256_and_si256(sc_m, _mm256_set1_epi32(0xF));
            _mm256_storeu_ps(sub_scale + 8 * i, _mm256_mul_ps(to_f32(sc), d));
            _mm256_storeu_ps(sub_min + 8 * i, _mm256_mul_ps(to_f32(_mm256_srli_epi32(sc_m, 4)), minus_dmin));
        }
        for (int j = 0; j < 8; j++) {
            __m256i q[4];
            __m256 v[4];
            low2x32(blk->qs, j, q);
            for (int i = 0; i < 4; i++)
                v[i] = _mm256_fmadd_ps(to_f32(q[i]), _mm256_broadcast_ss(sub_scale + 2 * j + i / 2),
                                       _mm256_broadcast_ss(sub_min + 2 * j + i / 2));
            emit(v, at + j * QK, x, ldx, nt, acc);
        }
    }
}

/* Q3_K: w = (d * sc) * q over sub-blocks of 16, q the low 2 bits minus 4 where bit j of hmask[l] (value l of
 * sub-block pair j) is clear */
INLINE void walk_q3_k(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q3_k *blk = (const block_q3_k *)w + v0 / QK_K;
    const __m256i four = _mm256_set1_epi32(4);
    for (int64_t at = 0; at < len; at += QK_K, blk++) {
        int8_t sc[16];
        float scales[16];  /* d * sc_j, broadcast from memory below */
        q3_k_scales(blk->scales, sc);
        const __m256 d = _mm256_set1_ps(f16(blk->d));
        for (int i = 0; i < 2; i++)
            _mm256_storeu_ps(scales + 8 * i, _mm256_mul_ps(d, to_f32(_mm256_cvtepi8_epi32(
                _mm_loadl_epi64((const __m128i *)(sc + 8 * i))))));
        __m256i high[4];
        for (int i = 0; i < 4; i++) high[i] = u8x8(blk->hmask + 8 * i);
        for (int j = 0; j < 8; j++) {
            __m256i q[4];
            __m256 v[4];
            low2x32(blk->qs, j, q);
            for (int i = 0; i < 4; i++) {  /* bit j of the mask to bit 2; minus 4 where it is clear */
                const __m256i at_2 = j >= 2 ? _mm256_srli_epi32(high[i], j - 2) : _mm256_slli_epi32(high[i], 2 - j);
                q[i] = _mm256_sub_epi32(q[i], _mm256_andnot_si256(at_2, four));
                v[i] = _mm256_mul_ps(_mm256_broadcast_ss(scales + 2 * j + i / 2), to_f32(q[i]));
            }
            emit(v, at + j * QK, x, ldx, nt, acc);
        }
    }
}

/* Q4_K / Q5_K superblock (qh NULL for Q4_K): sub-blocks 2c and 2c + 1 take the low and high nibbles of
 * qs[32c ..], bit j of qh[i] is bit 4 of value i of sub-block j; w = q * (d * sc) - dmin * m */
INLINE void superblock_k(const uint8_t *scales, float d, float dmin, const uint8_t *qs, const uint8_t *qh,
                         int64_t at, const float *x, int64_t ldx, const int nt, __m256 *acc) {
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
            emit(v, at + j * QK, x, ldx, nt, acc);
        }
    }
}

INLINE void walk_q4_k(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q4_k *blk = (const block_q4_k *)w + v0 / QK_K;
    for (int64_t at = 0; at < len; at += QK_K, blk++)
        superblock_k(blk->scales, f16(blk->d), f16(blk->dmin), blk->qs, NULL, at, x, ldx, nt, acc);
}

INLINE void walk_q5_k(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
    const block_q5_k *blk = (const block_q5_k *)w + v0 / QK_K;
    for (int64_t at = 0; at < len; at += QK_K, blk++)
        superblock_k(blk->scales, f16(blk->d), f16(blk->dmin), blk->qs, blk->qh, at, x, ldx, nt, acc);
}

/* Q6_K: sub-block j = 4h + s takes its low 4 bits from ql[h*64 + (s%2)*32 ..] (high nibbles for s >= 2),
 * its high 2 bits from qh[h*32 ..] >> 2s; minus 32; times d * the int8 scale of each 16 values */
INLINE void walk_q6_k(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                      const int nt, __m256 *acc) {
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
                emit(v, at + j * QK, x, ldx, nt, acc);
            }
        }
    }
}

INLINE void walk_iq4_xs(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,
                        const int nt, __m256 *acc) {
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
            emit(v, at + j * QK, x, ldx, nt, acc);
        }
    }
}

/* The i-quants (iquant_simd.h): w = (d * unit * k) * n. Both products are exact (d * unit has the 11 bits of
 * a float16, k 5, n 6 at most), so this is gguf's value whatever the order of its operations */
INLINE void walk_iq(void (*decode)(const uint8_t *, iq_superblock_t *), const int64_t block_bytes, const uint8_t *w,
                    int64_t v0, int64_t len, const float *x, int64_t ldx, const int nt, __m256 *acc) {
    const uint8_t *blk = w + v0 / QK_K * block_bytes;
    for (int64_t at = 0; at < len; at += QK_K, blk += block_bytes) {
        iq_superblock_t sb;
        float scales[16];  /* d * unit * k of each 16 values, broadcast from memory below */
        decode(blk, &sb);
        for (int i = 0; i < 2; i++)
            _mm256_storeu_ps(scales + 8 * i, _mm256_mul_ps(_mm256_set1_ps(sb.d_unit), to_f32(_mm256_cvtepu8_epi32(
                i ? _mm_srli_si128(sb.k, 8) : sb.k))));
        for (int j = 0; j < 8; j++) {
            const __m256i n = _mm256_sign_epi8(sb.magnitude[j], sb.signs[j]);
            const __m128i lo = _mm256_castsi256_si128(n), hi = _mm256_extracti128_si256(n, 1);
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            __m256 v[4];
            for (int i = 0; i < 4; i++)
                v[i] = _mm256_mul_ps(_mm256_broadcast_ss(scales + 2 * j + i / 2),
                                     to_f32(_mm256_cvtepi8_epi32(parts[i])));
            emit(v, at + j * QK, x, ldx, nt, acc);
        }
    }
}

#define IQ_WALK(name, id)                                                                                     \
    INLINE void walk_##name(const uint8_t *w, int64_t v0, int64_t len, const float *x, int64_t ldx,           \
                            const int nt, __m256 *acc) {                                                      \
        walk_iq(iq_decode_##name, sizeof(block_##name), w, v0, len, x, ldx, nt, acc);                         \
    }
IQ_TYPES(IQ_WALK)

INLINE float reduce(__m256 v) {  /* the 8 lanes in a fixed order */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* values a block of each type: run_<type> interleaves its weight rows block by block */
enum { BLOCK_q8_0 = QK, BLOCK_q4_0 = QK, BLOCK_q4_1 = QK, BLOCK_q5_0 = QK, BLOCK_q5_1 = QK, BLOCK_iq4_nl = QK,
       BLOCK_mxfp4 = QK,
       BLOCK_q2_k = QK_K, BLOCK_q3_k = QK_K, BLOCK_q4_k = QK_K, BLOCK_q5_k = QK_K, BLOCK_q6_k = QK_K,
       BLOCK_iq4_xs = QK_K, BLOCK_iq2_xxs = QK_K, BLOCK_iq2_xs = QK_K, BLOCK_iq2_s = QK_K, BLOCK_iq3_xxs = QK_K,
       BLOCK_iq3_s = QK_K, BLOCK_iq1_s = QK_K, BLOCK_iq1_m = QK_K };

/* acc [rows][DQ_T] += weight rows r (row_bytes apart) . x rows t < nt over values c0 .. c0 + len. run_<type>
 * takes nw weight rows at once, block by block (nw * nt <= 8 accumulators: at one or two rows of x, four
 * independent FMA chains hide the FMA latency), on a copy of their accumulators in locals (registers:
 * acc's memory could alias x, __m256 being may_alias). */
#define PASS(name)                                                                                            \
    INLINE void run_##name(const uint8_t *w, int64_t row_bytes, const int nw, int64_t c0, int64_t len,        \
                           const float *x, int64_t k, const int nt, __m256 (*acc)[DQ_T]) {                    \
        __m256 a[4][DQ_T];                                                                                    \
        for (int r = 0; r < nw; r++)                                                                          \
            for (int t = 0; t < nt; t++) a[r][t] = acc[r][t];                                                 \
        const int64_t block_bytes = row_bytes / (k / BLOCK_##name);                                           \
        for (int64_t b = c0; b < c0 + len; b += BLOCK_##name)                                                 \
            for (int r = 0; r < nw; r++) {                                                                    \
                const uint8_t *wr = w + r * row_bytes;                                                        \
                _mm_prefetch((const char *)wr + b / BLOCK_##name * block_bytes + PREFETCH, _MM_HINT_T0);      \
                walk_##name(wr, b, BLOCK_##name, x + b, k, nt, a[r]);                                         \
            }                                                                                                 \
        for (int r = 0; r < nw; r++)                                                                          \
            for (int t = 0; t < nt; t++) acc[r][t] = a[r][t];                                                 \
    }                                                                                                         \
    static void pass_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k,      \
                            int64_t c0, int64_t len, int nt, __m256 (*acc)[DQ_T]) {                           \
        const int nw = nt <= 2 ? 4 : nt <= 4 ? 2 : 1;                                                         \
        int64_t r = 0;                                                                                        \
        for (; nw > 1 && r + nw <= rows; r += nw) {                                                           \
            const uint8_t *wr = w + r * row_bytes;                                                            \
            switch (nt) {                                                                                     \
            case 1: run_##name(wr, row_bytes, 4, c0, len, x, k, 1, acc + r); break;                           \
            case 2: run_##name(wr, row_bytes, 4, c0, len, x, k, 2, acc + r); break;                           \
            case 3: run_##name(wr, row_bytes, 2, c0, len, x, k, 3, acc + r); break;                           \
            default: run_##name(wr, row_bytes, 2, c0, len, x, k, 4, acc + r); break;                          \
            }                                                                                                 \
        }                                                                                                     \
        for (; r < rows; r++) {                                                                               \
            const uint8_t *wr = w + r * row_bytes;                                                            \
            switch (nt) {                                                                                     \
            case 1: run_##name(wr, row_bytes, 1, c0, len, x, k, 1, acc + r); break;                           \
            case 2: run_##name(wr, row_bytes, 1, c0, len, x, k, 2, acc + r); break;                           \
            case 3: run_##name(wr, row_bytes, 1, c0, len, x, k, 3, acc + r); break;                           \
            case 4: run_##name(wr, row_bytes, 1, c0, len, x, k, 4, acc + r); break;                           \
            case 5: run_##name(wr, row_bytes, 1, c0, len, x, k, 5, acc + r); break;                           \
            case 6: run_##name(wr, row_bytes, 1, c0, len, x, k, 6, acc + r); break;                           \
            case 7: run_##name(wr, row_bytes, 1, c0, len, x, k, 7, acc + r); break;                           \
            default: run_##name(wr, row_bytes, 1, c0, len, x, k, 8, acc + r); break;                          \
            }                                                                                                 \
        }                                                                                                     \
    }

#define ROWS(name)                                                                                            \
    PASS(name)                                                                                                \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k,      \
                            int nt, float *y, int64_t ldy) {                                                  \
        __m256 acc[GROUP][DQ_T];                                                                              \
        const int64_t chunk = nt * k <= X_IN_L1 ? k : KCHUNK;  /* x fits in L1 whole: one pass */             \
        for (int64_t r0 = 0; r0 < rows; r0 += GROUP) {                                                        \
            const int64_t group = rows - r0 < GROUP ? rows - r0 : GROUP;                                      \
            for (int64_t r = 0; r < group; r++)                                                               \
                for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_ps();                                 \
            for (int64_t c0 = 0; c0 < k; c0 += chunk)                                                         \
                pass_##name(w + r0 * row_bytes, row_bytes, group, x, k, c0, k - c0 < chunk ? k - c0 : chunk,    \
                            nt, acc);                                                                         \
            for (int64_t r = 0; r < group; r++)                                                               \
                for (int t = 0; t < nt; t++) y[t * ldy + r0 + r] = reduce(acc[r][t]);                         \
        }                                                                                                     \
    }
#ifndef STRATA_DQ_AVX512
QMM_TYPES(QMM_ROWS)

void strata_dqmm_table_avx2(dq_rows_fn table[NUM_TYPES]) {
    QMM_TYPES(QMM_TABLE_ENTRY)
}
#endif

/* ---- many rows of x (prompt chunks): each weight row decoded once into a buffer ---------------------
 * Above DQ_MANY_MIN rows of x the decode in registers is paid once per tile of DQ_T rows, which a prompt
 * chunk repeats dozens of times; here up to MANY_W weight rows (a pool chunk's, dequant_matmul.c: at most 64)
 * are decoded once into a float buffer (the same values walk_<type> gives; L2-sized at the usual K) and met
 * by every row of x, 3 weight rows x 4 rows of x at a time (12 accumulators, 7 loads for 12 FMAs), so x is
 * read once a chunk. Each output still sums its row's vectors of 8 in order into one accumulator of 8 lanes,
 * then `reduce`: the bits of rows_<type>, so a row gives the same bits alone, in a tile or in a prompt chunk
 * (tests/kernels/test_cpu_dequant_matmul.py). On the 2-core Zen 4 VM (bench/results/2026-12-02-cpu-session21),
 * 512 rows of x times SmolLM2's Q4_1 projections ran at 89-103 GMAC/s (FMA peak ~109) against 70-83 with 2
 * weight rows a tile; a 512-token prefill's products took ~1.2 s through the tiles of DQ_T, 0.74-0.81 s with
 * the buffer and 2 weight rows a tile. */
enum { MANY_W = 64 };     /* weight rows a buffer holds */

#ifndef STRATA_DQ_AVX512
enum { MANY_TILE_W = 3 };  /* weight rows x 4 rows of x a tile: 12 accumulators, 7 loads for 12 FMAs */
#define DECODED_ROW(buf, r, k) ((buf) + (r) * (k))  /* where decoded row r starts, and its vectors' stride */
enum { DECODED_STRIDE = 1 };
/* y[t * ldy + r] = weight row r (nw rows of k floats, k apart from w) . x row t (ldx apart), t < nt */
INLINE void many_tile(const float *w, const int nw, const float *x, int64_t ldx, const int nt, int64_t k, float *y,
                      int64_t ldy) {
    __m256 a[MANY_TILE_W][4];
    for (int r = 0; r < nw; r++)
        for (int t = 0; t < nt; t++) a[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        __m256 v[MANY_TILE_W];
        for (int r = 0; r < nw; r++) v[r] = _mm256_loadu_ps(w + r * k + i);
        for (int t = 0; t < nt; t++) {
            const __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
            for (int r = 0; r < nw; r++) a[r][t] = _mm256_fmadd_ps(v[r], xv, a[r][t]);
        }
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nw; r++) y[t * ldy + r] = reduce(a[r][t]);
}

static void many_rows(float *buf, int nw, const float *x, int64_t k, int64_t t, float *y, int64_t ldy) {
    for (int64_t t0 = 0; t0 < t; t0 += 4) {
        const int nt = t - t0 < 4 ? (int)(t - t0) : 4;
        for (int r = 0; r < nw; r += MANY_TILE_W) {
            const int rows = nw - r < MANY_TILE_W ? nw - r : MANY_TILE_W;
            const float *w = buf + r * k, *xt = x + t0 * k;
            float *out = y + t0 * ldy + r;
            switch (nt * 4 + rows) {  /* constant trip counts, so the accumulators stay in registers */
#define TILE(nt_, rows_) case nt_ * 4 + rows_: many_tile(w, rows_, xt, k, nt_, k, out, ldy); break;
            TILE(1, 1) TILE(1, 2) TILE(1, 3) TILE(2, 1) TILE(2, 2) TILE(2, 3)
            TILE(3, 1) TILE(3, 2) TILE(3, 3) TILE(4, 1) TILE(4, 2) TILE(4, 3)
#undef TILE
            }
        }
    }
}

#else  /* dequant_avx512.c, which includes this file, defines DECODED_ROW, DECODED_STRIDE and this */
static void many_rows(float *buf, int nw, const float *x, int64_t k, int64_t t, float *y, int64_t ldy);
#endif

#define MANY(name, id)                                                                                        \
    static int many_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k,       \
                           int64_t t, float *y, int64_t ldy) {                                               \
        float *buf = aligned_alloc(64, sizeof(float) * (size_t)(MANY_W * k));                                 \
        if (buf == NULL) return 1;                                                                            \
        for (int64_t r0 = 0; r0 < rows; r0 += MANY_W) {                                                       \
            const int nw = rows - r0 < MANY_W ? (int)(rows - r0) : MANY_W;                                    \
            for (int r = 0; r < nw; r++)                                                                      \
                walk_##name(w + (r0 + r) * row_bytes, 0, k, DECODED_ROW(buf, r, k), DECODED_STRIDE, 0, NULL);     \
            many_rows(buf, nw, x, k, t, y + r0, ldy);                                                        \
        }                                                                                                     \
        free(buf);                                                                                            \
        return 0;                                                                                             \
    }
QMM_TYPES(MANY)
#define MANY_ENTRY(name, id) table[id] = many_##name;

#ifndef STRATA_DQ_AVX512
void strata_dqmm_many_table_avx2(dq_many_fn table[NUM_TYPES]) {
    QMM_TYPES(MANY_ENTRY)
}
#endif
