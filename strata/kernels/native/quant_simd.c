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

#include "quant_simd_block32.h"


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
#include "quant_simd_kquants512.h"
#else  /* the AVX2 table's Q4_K, Q5_K and Q6_K: 32 values a vector */
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
