/* The x86 SIMD kernels, compiled twice by strata/kernels/cpu_quant.py: with -mavx2 -mfma -mf16c (the
 * AVX2 table) and with AVX-512 F/BW/VL/VNNI added (the AVX-512 table), where the unscaled u8 x s8 dot
 * products are one vpdpbusd instead of vpmaddubsw + vpmaddwd. Both work on 256-bit vectors, one block
 * of 32 values (or one sub-block) a vector, except the AVX-512 table's Q4_K, Q5_K and Q6_K (64 values a vector,
 * the same bits: see their section); its 32-value blocks take their nibbles and fifth bits through mask registers
 * (session 73, bench/results/2026-12-07-cpu-session73: one row of 2560 x 640 on one thread of the 2-core Xeon VM,
 * Q5_0 166-168 -> 133-144 us, Q5_1 160-165 -> 133-136, Q4_0 139-144 -> 120-128, with the two-row pass below).
 * One row of x meets two weight rows a pass there (ROWS_PAIRED), the same operations per row.
 *
 * Same arithmetic as quant_scalar.c (integer dot products per block, float scales once per block), so
 * the two agree up to float summation order. Each weight block is decoded once and used for up to MAX_T
 * activation rows; nt is a compile-time constant in every kernel body (see ROWS), so the per-row
 * accumulators stay in registers. Signed x signed products use the sign trick (|w| times x with w's
 * sign): vpmaddubsw sums two u8 x s8 products into int16, which |w| <= 128, |x| <= 127 keeps exact. The
 * i-quants' superblocks are decoded by one function a type (iquant_simd.h), not once per row count. */
#include <immintrin.h>

#include "iquant_simd.h"
#include "simd_rows.h"

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define TABLE strata_qmm_table_avx512
INLINE __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
#else
#define TABLE strata_qmm_table_avx2
INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#endif

/* int32 lane i = sum of products 4i..4i+3 times the int16 scale of those values (scale16: one per 16
 * values, each repeated 8 times) */
INLINE __m256i dot_u8s8_scaled(__m256i u, __m256i s, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16);
}

INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

INLINE __m256i nibbles32(const uint8_t *qs) {  /* 16 bytes -> 32 values: low nibbles, then high */
#if defined(__AVX512BW__) && defined(__AVX512VL__)  /* the bytes broadcast as they load; the high half's shifted */
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_mask_srli_epi16(q, 0xFF00, q, 4), _mm256_set1_epi8(0xF));
#else
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
#endif
}

/* Q5_*: the fifth bits of a block's 32 values (qh, a little-endian uint32: bit i is value i's) as bytes 0 or
 * 16, byte i for value i: byte i takes qh's byte i / 8, then keeps its bit i % 8 */
INLINE __m256i fifth_bits32(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)  /* the bits as a byte mask */
    return _mm256_maskz_mov_epi8(_cvtu32_mask32(bits), _mm256_set1_epi8(16));
#endif
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

INLINE float f16(uint16_t h) { return _cvtsh_ss(h); }

/* ---- 32-value blocks: each weight block is decoded in registers and used for the tile's rows -----
 * Rows in groups of 4 (one row too, with three empty ones): two levels of horizontal adds leave
 * [rows 0-3 from the low 128 bits | rows 0-3 from the high], so converting, scaling and accumulating is
 * one vector op per block for 4 rows, not one per row; the two halves are added at the end. The integer
 * sums are exact in float32 (|sum| < 2^24). A row's arithmetic is thus the same whatever the tile's row
 * count: a batched step gives each row the numbers it gets alone (as the superblock kernels do). */

/* [v0 lo, v1 lo, v2 lo, v3 lo | v0 hi, v1 hi, v2 hi, v3 hi]: the sums of each 128-bit half */
INLINE __m256i hsum4_epi32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
}

/* Q8_0, IQ4_NL and MXFP4 (signed values: their nibbles looked up in IQ4_VALUES / MXFP4_VALUES by one byte shuffle), Q4_0 / Q4_1
 * (unsigned nibbles; Q4_0's -8 is a minimum of -8 d) and Q5_0 / Q5_1 (unsigned 5-bit values; Q5_0's -16 is a
 * minimum of -16 d). IQ4_NL stays signed: its values plus 127 (0..240) would overflow vpmaddubsw's int16 pairs */
INLINE int block32_signed(const int type) { return type == T_Q8_0 || type == T_IQ4_NL || type == T_MXFP4; }

INLINE void block32_scales(const uint8_t *w, const int type, int64_t b, float *d, float *m) {  /* m: 0 if signed */
    *m = 0.f;
    if (type == T_Q8_0) {
        *d = f16(((const block_q8_0 *)w + b)->d);
    } else if (type == T_IQ4_NL || type == T_Q4_0) {
        *d = f16(((const block_q4_0 *)w + b)->d);
        if (type == T_Q4_0) *m = -8.f * *d;
    } else if (type == T_MXFP4) {
        *d = mxfp4_scale(((const block_mxfp4 *)w + b)->e);
    } else if (type == T_Q5_0) {
        *d = f16(((const block_q5_0 *)w + b)->d), *m = -16.f * *d;
    } else {  /* Q4_1, Q5_1: d and m side by side, one conversion */
        const uint16_t *dm16 = type == T_Q4_1 ? &((const block_q4_1 *)w + b)->d : &((const block_q5_1 *)w + b)->d;
        uint32_t dm;
        memcpy(&dm, dm16, 4);
        const __m128 dm_f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
        *d = _mm_cvtss_f32(dm_f), *m = _mm_cvtss_f32(_mm_movehdup_ps(dm_f));
    }
}

INLINE __m256i block32_values(const uint8_t *w, const int type, int64_t b) {  /* block b's 32 values as bytes */
    if (type == T_Q8_0) return load32(((const block_q8_0 *)w + b)->qs);
    if (type == T_IQ4_NL || type == T_MXFP4) {
        const int8_t *table = type == T_IQ4_NL ? IQ4_VALUES : MXFP4_VALUES;
        const uint8_t *qs = type == T_IQ4_NL ? ((const block_iq4_nl *)w + b)->qs : ((const block_mxfp4 *)w + b)->qs;
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table)), nibbles32(qs));
    }
    if (type == T_Q4_0) return nibbles32(((const block_q4_0 *)w + b)->qs);
    if (type == T_Q4_1) return nibbles32(((const block_q4_1 *)w + b)->qs);
    if (type == T_Q5_0) {
        const block_q5_0 *blk = (const block_q5_0 *)w + b;
        return _mm256_or_si256(nibbles32(blk->qs), fifth_bits32(blk->qh));
    }
    const block_q5_1 *blk = (const block_q5_1 *)w + b;
    return _mm256_or_si256(nibbles32(blk->qs), fifth_bits32(blk->qh));
}

/* One row of x against weight rows w[0..R-1] (R = 1 or 2): block32_row's one-row arithmetic for each, the rows'
 * blocks interleaved so their chains of float multiply-adds (one a block, four cycles each) overlap; every
 * output keeps the bits it gets alone. */
INLINE void block32_one_row(const uint8_t *const *w, const int R, const int type, const acts_t *x, int64_t t0,
                            float *y) {
    const int is_signed = block32_signed(type);
    const float *xd = d_at(x, t0, 0), *bsum = bsum_at(x, t0, 0);
    const int8_t *xq = x->q + t0 * x->k;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, mins[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < x->k / QK; b++) {
        const __m256i xb = load32(xq + b * QK);
        for (int r = 0; r < R; r++) {
            float d, m;
            block32_scales(w[r], type, b, &d, &m);
            const __m256i q = block32_values(w[r], type, b);
            if (!is_signed) mins[r] = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_loadu_ps(bsum + b * MAX_T), mins[r]);
            const __m256i p = dot_u8s8(is_signed ? _mm256_sign_epi8(q, q) : q, is_signed ? _mm256_sign_epi8(xb, q) : xb);
            /* lanes 0 and 4 as hsum4_epi32 leaves them, by two shuffles and adds for its three hadds */
            const __m256i pairs = _mm256_add_epi32(p, _mm256_shuffle_epi32(p, 0xB1));
            const __m256i sums = _mm256_add_epi32(pairs, _mm256_shuffle_epi32(pairs, 0x4E));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xd[b * MAX_T]), _mm256_cvtepi32_ps(sums), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float rows[4], m[MAX_T];
        _mm256_storeu_ps(m, mins[r]);
        _mm_storeu_ps(rows, _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1)));
        y[r] = rows[0] + m[0];
    }
}

INLINE void block32_row(const uint8_t *w, const int type, const acts_t *x, int64_t t0, const int nt, float *y,
                        int64_t ldy) {
    if (nt == 1) {
        block32_one_row(&w, 1, type, x, t0, y);
        return;
    }
    const int64_t k = x->k;
    const int is_signed = block32_signed(type);
    const float *xd = d_at(x, t0, 0), *bsum = bsum_at(x, t0, 0);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, mins = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / QK; b++) {
        float d, m;
        block32_scales(w, type, b, &d, &m);
        const __m256i q = block32_values(w, type, b);
        if (!is_signed) mins = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_loadu_ps(bsum + b * MAX_T), mins);
        const __m256i q_abs = is_signed ? _mm256_sign_epi8(q, q) : q;
        __m256i p[MAX_T];
        for (int t = 0; t < MAX_T; t++) {
            p[t] = _mm256_setzero_si256();
            if (t >= nt) continue;
            const __m256i xq = load32(x->q + (t0 + t) * k + b * QK);
            p[t] = dot_u8s8(q_abs, is_signed ? _mm256_sign_epi8(xq, q) : xq);
        }
        for (int g = 0; g < (nt + 3) / 4; g++) {
            const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_broadcast_ps((const __m128 *)(xd + b * MAX_T + 4 * g)));
            const __m256i sums = hsum4_epi32(p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3]);
            acc[g] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[g]);
        }
    }
    float rows[MAX_T], m[MAX_T];
    _mm256_storeu_ps(m, mins);
    for (int g = 0; g < (nt + 3) / 4; g++)
        _mm_storeu_ps(rows + 4 * g, _mm_add_ps(_mm256_castps256_ps128(acc[g]), _mm256_extractf128_ps(acc[g], 1)));
    for (int t = 0; t < nt; t++) y[t * ldy] = rows[t] + m[t];
}

/* The 32-value block types' rows functions: name##_each_row for any rows of x, name##_row_pair for one row of x
 * against one or two weight rows (ROWS_PAIRED) */
#define BLOCK32_KERNELS(name, type)                                                                             \
    INLINE void name##_each_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y,         \
                                int64_t ldy) {                                                                 \
        block32_row(w, type, x, t0, nt, y, ldy);                                                               \
    }                                                                                                          \
    INLINE void name##_row_pair(const uint8_t *w, int64_t row_bytes, int count, const acts_t *x, int64_t t0,   \
                                float *y) {                                                                    \
        const uint8_t *rows[2] = {w, w + row_bytes};                                                           \
        if (count == 2) block32_one_row(rows, 2, type, x, t0, y);                                              \
        else block32_one_row(rows, 1, type, x, t0, y);                                                         \
    }
BLOCK32_KERNELS(q8_0, T_Q8_0)
BLOCK32_KERNELS(q4_0, T_Q4_0)
BLOCK32_KERNELS(q4_1, T_Q4_1)
BLOCK32_KERNELS(q5_0, T_Q5_0)
BLOCK32_KERNELS(q5_1, T_Q5_1)
BLOCK32_KERNELS(iq4_nl, T_IQ4_NL)
BLOCK32_KERNELS(mxfp4, T_MXFP4)

/* ---- 256-value superblocks: decoded once into 8 vectors of 32 values and their integer scales, then
 * each activation row runs over them (the decoded block stays in registers or L1). The 8 scales of IQ4_XS are
 * unpacked in general registers and broadcast one by one (on the Zen 1 of early sessions shuffles measured
 * slower); Q4_K's and Q5_K's take byte shuffles since session 41 (scales_k4, measured on an Intel Xeon). The 16
 * of Q2_K, Q3_K and Q6_K (two a vector) take one shuffle a vector (scale_pairs16): on the 2-core Zen 4 (AVX-512),
 * one row of 2048 x 5632 on one thread took Q6_K 586 -> 412 us, Q2_K 445 -> 307 us against two broadcasts and
 * an insert a vector. ------------------------------------------------------------------------------ */

/* acc[t] += d * d_x[t] * sum_j (scale_j * w_j . x_j) [+ min_terms . bsum of row t] for the 8 decoded
 * vectors w_j; signs: NULL where w_j are the unsigned values, else w_j are their magnitudes and x_j takes the
 * sign of signs[j] (the sign trick). mins: 0 (none), 8 (one vector of min_terms, a sub-block of 32 each:
 * bsum_rows) or 16 (two, a sub-block of 16 each: bsum16_rows) */
/* acc[t] += d * d_x[t] * isum [+ min_terms . bsum of row t]: a row's integer sums (8 lanes) scaled, and the
 * sub-blocks' minimum terms (mins: 0, 8 or 16, as superblock_rows) */
INLINE void scale_row(__m256i isum, float d, const int mins, const __m256 *min_terms, const acts_t *x, int64_t t0,
                      int t, int64_t b, __m256 *acc) {
    const int64_t k = x->k;
    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * *d_at(x, t0 + t, b)), _mm256_cvtepi32_ps(isum), acc[t]);
    /* acc's lanes are partial sums until the end: the sub-blocks' minimum terms too */
    if (mins == 8)
        acc[t] = _mm256_fmadd_ps(min_terms[0], _mm256_loadu_ps(x->bsum_rows + (t0 + t) * (k / QK) + b * 8), acc[t]);
    for (int h = 0; mins == 16 && h < 2; h++) {
        const float *bsum16 = x->bsum16_rows + (t0 + t) * (k / 16) + b * 16 + 8 * h;
        acc[t] = _mm256_fmadd_ps(min_terms[h], _mm256_loadu_ps(bsum16), acc[t]);
    }
}

/* acc[t] += d * d_x[t] * sum_j (scale_j * w_j . x_j) [+ min_terms . bsum of row t] for the 8 decoded
 * vectors w_j; signs: NULL where w_j are the unsigned values, else w_j are their magnitudes and x_j takes the
 * sign of signs[j] (the sign trick). mins: 0 (none), 8 (one vector of min_terms, a sub-block of 32 each:
 * bsum_rows) or 16 (two, a sub-block of 16 each: bsum16_rows) */
INLINE void superblock_rows(const __m256i *w, const __m256i *signs, const __m256i *scale16, float d,
                            const int mins, const __m256 *min_terms, const acts_t *x, int64_t t0, const int nt,
                            int64_t b, __m256 *acc) {
    for (int t = 0; t < nt; t++) {
        const int8_t *xq = x->q + (t0 + t) * x->k + b * QK_K;
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i xj = load32(xq + j * QK);
            if (signs != NULL) xj = _mm256_sign_epi8(xj, signs[j]);
            isum = _mm256_add_epi32(isum, dot_u8s8_scaled(w[j], xj, scale16[j]));
        }
        scale_row(isum, d, mins, min_terms, x, t0, t, b, acc);
    }
}

INLINE void magnitudes(const __m256i *wv, __m256i *w_abs) {  /* signed values -> |values| */
    for (int j = 0; j < 8; j++) w_abs[j] = _mm256_sign_epi8(wv[j], wv[j]);
}

/* Q2_K / Q3_K: the 2 low bits of the 256 values, 32 a vector (quant_matmul.h: value 128h + 32s + l in bits 2s
 * of qs[32h + l]) */
INLINE void low2_k(const uint8_t *qs, __m256i *wv) {
    for (int h = 0; h < 2; h++) {
        const __m256i q = load32(qs + 32 * h);
        for (int s = 0; s < 4; s++) wv[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), _mm256_set1_epi8(3));
    }
}

/* Q2_K, Q3_K, Q6_K: the 16 byte scales of sub-blocks of 16 (signed or not) -> scale16[j], int16 scale 2j for
 * values 32j..32j+15 (the low 128 bits), 2j + 1 for the rest: one byte shuffle a vector */
INLINE void scale_pairs16(__m128i bytes, const int is_signed, __m256i *scale16) {
    const __m256i words = is_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);  /* [16] */
    const __m256i halves[2] = {_mm256_permute2x128_si256(words, words, 0x00),   /* scales 0-7 in both lanes */
                               _mm256_permute2x128_si256(words, words, 0x11)};  /* 8-15 */
    for (int j = 0; j < 8; j++) {  /* word 2 (j % 4) of the low lane, word 2 (j % 4) + 1 of the high one */
        const char lo = (char)(4 * (j % 4)), hi = (char)(4 * (j % 4) + 2);
        const __m256i pick = _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1,
                                              lo, lo + 1, lo, lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                                              hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1);
        scale16[j] = _mm256_shuffle_epi8(halves[j / 4], pick);
    }
}

/* factor * the 16 signed byte scales of sub-blocks of 16, as two vectors of 8 floats (minimum terms: mins == 16) */
INLINE void scaled_bytes16(__m128i scales, float factor, __m256 *terms) {
    const __m256 f = _mm256_set1_ps(factor);
    terms[0] = _mm256_mul_ps(f, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(scales)));
    terms[1] = _mm256_mul_ps(f, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(scales, 8))));
}

INLINE void q2_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q2_k *blk = (const block_q2_k *)w + b;
        __m256i wv[8], scale16[8];
        low2_k(blk->qs, wv);
        const __m128i sc_m = _mm_loadu_si128((const __m128i *)blk->scales), nibble = _mm_set1_epi8(0xF);
        scale_pairs16(_mm_and_si128(sc_m, nibble), 0, scale16);
        const __m128i m = _mm_and_si128(_mm_srli_epi16(sc_m, 4), nibble);  /* the 16 sub-blocks' mins */
        const __m256 minus_dmin = _mm256_set1_ps(-f16(blk->dmin));
        const __m256 min_terms[2] = {_mm256_mul_ps(minus_dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))),
                                     _mm256_mul_ps(minus_dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                         _mm_srli_si128(m, 8))))};
        superblock_rows(wv, NULL, scale16, f16(blk->d), 16, min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

/* Q3_K: w = d * sc_j * (q - 4), q = the 2 low bits | the hmask bit as 4, taken as d * sc_j * q (unsigned q, as
 * Q2_K's) plus a minimum -4 d sc_j that meets the sums of 16: no sign trick, one row of 2048 x 5632 548 -> 380 us
 * against Q6_K's signed values (as above) */
INLINE void q3_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q3_k *blk = (const block_q3_k *)w + b;
        __m256i wv[8], scale16[8];
        low2_k(blk->qs, wv);
        const __m256i hmask = load32(blk->hmask), four = _mm256_set1_epi8(4);
        for (int j = 0; j < 8; j++) {  /* bit j of hmask[l] (value 32j + l's) to bit 2 */
            const __m256i at_2 = j >= 2 ? _mm256_srli_epi16(hmask, j - 2) : _mm256_slli_epi16(hmask, 2 - j);
            wv[j] = _mm256_or_si256(wv[j], _mm256_and_si256(at_2, four));
        }
        uint64_t biased[2];
        q3_k_biased_scales(blk->scales, biased);
        const __m128i scales = _mm_sub_epi8(_mm_set_epi64x((int64_t)biased[1], (int64_t)biased[0]),
                                            _mm_set1_epi8(32));  /* -32..31 */
        scale_pairs16(scales, 1, scale16);
        const float d = f16(blk->d);
        __m256 min_terms[2];
        scaled_bytes16(scales, -4.f * d, min_terms);
        superblock_rows(wv, NULL, scale16, d, 16, min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

/* Q4_K / Q5_K: the 8 scales as 16-copy vectors; returns -dmin * min_j for the 8 sub-blocks. The 12 bytes of
 * scale_min_k4's layout (quant_matmul.h; b0 b1 b2, 4 each) go to [8 scales | 8 mins] by byte shuffles:
 * scale i < 4 = b0_i & 63, scale 4 + i = (b2_i & 15) | (b0_i >> 6) << 4, min i = b1_i & 63,
 * min 4 + i = (b2_i >> 4) | (b1_i >> 6) << 4 (the 16 bytes read run into the block's quants, unused). Same
 * integers as unpacking them in general registers and broadcasting one at a time, with which a one-row
 * 1536 x 2048 product took 106-128 us against 104-105 (min of 1,000 on one thread of the Xeon VM:
 * bench/results/2026-12-04-cpu-session41/scales_ab.txt). */
INLINE __m128i scale_min_bytes_k4(const uint8_t *packed) {  /* -> [8 scales | 8 mins], one byte each */
    const __m128i v = _mm_loadu_si128((const __m128i *)packed);
    const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i keep = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m128i low_bits = _mm_and_si128(_mm_blend_epi32(low, _mm_srli_epi16(low, 4), 0x8), keep);
    return _mm_or_si128(low_bits, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

INLINE __m256 min_terms_k4(__m128i bytes, float dmin) {  /* -dmin * min_j for the 8 sub-blocks */
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
    return _mm256_mul_ps(_mm256_set1_ps(-dmin), mins);
}

INLINE __m256 scales_k4(const uint8_t *packed, float dmin, __m256i *scale16) {
    const __m128i bytes = scale_min_bytes_k4(packed);
    const __m256i words = _mm256_cvtepu8_epi16(bytes);                             /* [8 scales | 8 mins] */
    const __m256i scales = _mm256_permute2x128_si256(words, words, 0x00);          /* the scales in both lanes */
    for (int j = 0; j < 8; j++) {
        const char l = (char)(2 * j), h = (char)(2 * j + 1);
        scale16[j] = _mm256_shuffle_epi8(scales, _mm256_setr_epi8(l, h, l, h, l, h, l, h, l, h, l, h, l, h, l, h,
                                                                  l, h, l, h, l, h, l, h, l, h, l, h, l, h, l, h));
    }
    return min_terms_k4(bytes, dmin);
}

INLINE void nibbles_k(const uint8_t *qs, __m256i *wv) {  /* 32 bytes c: sub-block 2c low nibbles, 2c + 1 high */
    for (int c = 0; c < 4; c++) {
        const __m256i q = load32(qs + 32 * c);
        wv[2 * c] = _mm256_and_si256(q, _mm256_set1_epi8(0xF));
        wv[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0xF));
    }
}

#if defined(__AVX512BW__)
/* ---- The AVX-512 table's Q4_K, Q5_K and Q6_K: 64 values a vector (two sub-blocks of 32: their quants side by side
 * in value order, and x's 64 bytes as they lie), so a row of a tile takes half the loads, multiplies and adds of the
 * 256-bit kernels above, and a superblock half their decoding. A row's integer sum is folded to the 8 lanes those
 * build (lane i of each half holds values 4i..4i+3 of its sub-block: adding the halves sums exact integers) and then
 * scaled by the same float operations, so each output has the AVX2 table's bits, alone or in a batch
 * (tests/kernels/test_cpu_quant.py holds them to that). */

INLINE __m512i halves_select(int low, int high) {  /* words 0-15 (the low 256 bits) low, 16-31 high */
    return _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)low), _mm512_set1_epi16((short)high));
}

/* acc[t] += d * d_x[t] * sum_c (scale_c * w_c . x_c) [+ min terms] for the 4 vectors w_c of 64 unsigned values
 * (values 64c..64c+63) and their int16 scales (one a 16-bit lane: each pair of products' scale) */
INLINE void superblock_rows512(const __m512i *w, const __m512i *scale, float d, const int mins,
                               const __m256 *min_terms, const acts_t *x, int64_t t0, const int nt, int64_t b,
                               __m256 *acc) {
    for (int t = 0; t < nt; t++) {
        const int8_t *xq = x->q + (t0 + t) * x->k + b * QK_K;
        __m512i isum = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i pairs = _mm512_maddubs_epi16(w[c], _mm512_loadu_si512((const void *)(xq + 64 * c)));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(pairs, scale[c]));
        }
        const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
        scale_row(folded, d, mins, min_terms, x, t0, t, b, acc);
    }
}

/* Q4_K / Q5_K: 32 bytes c of quants -> values 64c..64c+63 (low nibbles: sub-block 2c, high: 2c + 1); the 8 scales
 * as scale[c] = sub-block 2c's in the low half, 2c + 1's in the high; returns -dmin * min_j */
INLINE __m256 decode_k4_512(const uint8_t *packed, float dmin, const uint8_t *qs, __m512i *w, __m512i *scale) {
    const __m128i bytes = scale_min_bytes_k4(packed);
    const __m512i words = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(bytes));  /* the 8 scales in every 128 bits */
    for (int c = 0; c < 4; c++) {
        const __m512i q = _mm512_broadcast_i64x4(load32(qs + 32 * c));
        w[c] = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4), _mm512_set1_epi8(0xF));
        /* byte pairs (4c, 4c + 1): word 2c, for the low 256 bits; (4c + 2, 4c + 3): word 2c + 1, the high */
        scale[c] = _mm512_shuffle_epi8(words, halves_select((4 * c + 1) << 8 | 4 * c, (4 * c + 3) << 8 | (4 * c + 2)));
    }
    return min_terms_k4(bytes, dmin);
}

INLINE void q4_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q4_k *blk = (const block_q4_k *)w + b;
        __m512i wv[4], scale[4];
        const __m256 min_terms = decode_k4_512(blk->scales, f16(blk->dmin), blk->qs, wv, scale);
        superblock_rows512(wv, scale, f16(blk->d), 8, &min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

INLINE void q5_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q5_k *blk = (const block_q5_k *)w + b;
        __m512i wv[4], scale[4];
        const __m256 min_terms = decode_k4_512(blk->scales, f16(blk->dmin), blk->qs, wv, scale);
        const __m512i qh = _mm512_broadcast_i64x4(load32(blk->qh));
        for (int c = 0; c < 4; c++) {  /* bit j of qh[l] is bit 4 of value l of sub-block j = 2c, 2c + 1 */
            const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, halves_select(2 * c, 2 * c + 1)),
                                                 _mm512_set1_epi8(1));
            wv[c] = _mm512_or_si512(wv[c], _mm512_slli_epi16(bit, 4));
        }
        superblock_rows512(wv, scale, f16(blk->d), 8, &min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

/* Q6_K as the 256-bit kernel takes it (unsigned q, a minimum -32 d sc_j): values 64c.. are half h = c / 2,
 * quarters s = 2 (c % 2) and s + 1, whose low nibbles are the 64 bytes ql[64 h..] (shifted by 4 for c odd) and
 * high bits qh[32 h + l] >> 2s and >> 2s + 2; their 16-value scales 4c..4c + 3, one a 128 bits */
INLINE void q6_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q6_k *blk = (const block_q6_k *)w + b;
        __m512i wv[4], scale[4];
        const __m128i scales = _mm_loadu_si128((const __m128i *)blk->scales);
        const __m512i words = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(scales));  /* [16] signed */
        for (int c = 0; c < 4; c++) {
            const int h = c / 2, s = 2 * (c % 2);
            __m512i lo = _mm512_loadu_si512((const void *)(blk->ql + 64 * h));
            if (c % 2) lo = _mm512_srli_epi16(lo, 4);
            const __m512i qh = _mm512_broadcast_i64x4(load32(blk->qh + 32 * h));
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, halves_select(2 * s, 2 * s + 2)),
                                                _mm512_set1_epi8(3));
            wv[c] = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(0xF)), _mm512_slli_epi16(hi, 4));
            const __m512i pick = _mm512_set_epi64(0x0001000100010001LL * (4 * c + 3), 0x0001000100010001LL * (4 * c + 3),
                                                  0x0001000100010001LL * (4 * c + 2), 0x0001000100010001LL * (4 * c + 2),
                                                  0x0001000100010001LL * (4 * c + 1), 0x0001000100010001LL * (4 * c + 1),
                                                  0x0001000100010001LL * (4 * c), 0x0001000100010001LL * (4 * c));
            scale[c] = _mm512_permutexvar_epi16(pick, words);
        }
        const float d = f16(blk->d);
        __m256 min_terms[2];
        scaled_bytes16(scales, -32.f * d, min_terms);
        superblock_rows512(wv, scale, d, 16, min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}
#else
INLINE void q4_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q4_k *blk = (const block_q4_k *)w + b;
        __m256i wv[8], scale16[8];
        const __m256 min_terms = scales_k4(blk->scales, f16(blk->dmin), scale16);
        nibbles_k(blk->qs, wv);
        superblock_rows(wv, NULL, scale16, f16(blk->d), 8, &min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

INLINE void q5_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q5_k *blk = (const block_q5_k *)w + b;
        __m256i wv[8], scale16[8];
        const __m256 min_terms = scales_k4(blk->scales, f16(blk->dmin), scale16);
        nibbles_k(blk->qs, wv);
        const __m256i qh = load32(blk->qh), one = _mm256_set1_epi8(1);
        for (int j = 0; j < 8; j++) {  /* bit j of qh[l] is bit 4 of value l of sub-block j */
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4);
            wv[j] = _mm256_or_si256(wv[j], hi);
        }
        superblock_rows(wv, NULL, scale16, f16(blk->d), 8, &min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

/* Q6_K: w = d * sc_j * (q - 32), taken as d * sc_j * q (unsigned q, 0..63) plus a minimum -32 d sc_j that meets the
 * sums of 16, as Q3_K: no sign trick (its magnitudes and a sign op a row and vector) */
INLINE void q6_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q6_k *blk = (const block_q6_k *)w + b;
        __m256i wv[8], scale16[8];
        for (int j = 0; j < 8; j++) {  /* values 32j.. of half h = j / 4, quarter s = j % 4: see quant_scalar.c */
            const int h = j / 4, s = j % 4;
            __m256i lo = load32(blk->ql + h * 64 + (s % 2) * 32);
            if (s >= 2) lo = _mm256_srli_epi16(lo, 4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(load32(blk->qh + h * 32), 2 * s), _mm256_set1_epi8(3));
            wv[j] = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0xF)), _mm256_slli_epi16(hi, 4));
        }
        const __m128i scales = _mm_loadu_si128((const __m128i *)blk->scales);
        scale_pairs16(scales, 1, scale16);
        const float d = f16(blk->d);
        __m256 min_terms[2];
        scaled_bytes16(scales, -32.f * d, min_terms);
        superblock_rows(wv, NULL, scale16, d, 16, min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}
#endif

INLINE void iq4_xs_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)IQ4_VALUES));
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_iq4_xs *blk = (const block_iq4_xs *)w + b;
        __m256i wv[8], w_abs[8], scale16[8];
        for (int j = 0; j < 8; j++) {
            wv[j] = _mm256_shuffle_epi8(values, nibbles32(blk->qs + 16 * j));
            scale16[j] = _mm256_set1_epi16((int16_t)iq4_xs_scale(blk, j));
        }
        magnitudes(wv, w_abs);
        superblock_rows(w_abs, wv, scale16, f16(blk->d), 0, NULL, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

/* The i-quants (iquant_simd.h): a superblock decoded once (one function a type), then met by the tile's rows */
INLINE void iq_row(void (*decode)(const uint8_t *, iq_superblock_t *), const int64_t block_bytes, const uint8_t *w,
                   const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        iq_superblock_t sb;
        __m256i scale16[8];
        decode(w + b * block_bytes, &sb);
        scale_pairs16(sb.k, 0, scale16);
        superblock_rows(sb.magnitude, sb.signs, scale16, sb.d_unit, 0, NULL, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

#define IQ_ROW(name, id)                                                                                      \
    INLINE void name##_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) { \
        iq_row(iq_decode_##name, sizeof(block_##name), w, x, t0, nt, y, ldy);                                 \
    }
IQ_TYPES(IQ_ROW)

#define BLOCK32_TYPES(X) X(q8_0) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(iq4_nl) X(mxfp4)
#define SUPERBLOCK_TYPES(X) X(q2_k) X(q3_k) X(q4_k) X(q5_k) X(q6_k) X(iq4_xs)
BLOCK32_TYPES(ROWS_PAIRED)
SUPERBLOCK_TYPES(ROWS)
IQ_TYPES(QMM_ROWS)

void TABLE(rows_fn table[NUM_TYPES]) {
    QMM_TYPES(QMM_TABLE_ENTRY)
}
