/* Included by quant_simd.c (once a kernel table, after its vector helpers): the 32-value block types' row
 * kernels (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) and their ROWS_PAIRED one-row pass. */
#ifndef STRATA_QUANT_SIMD_BLOCK32_H
#define STRATA_QUANT_SIMD_BLOCK32_H

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
 * blocks interleaved (x's block loaded once for both, their serial chains of float multiply-adds side by side);
 * every output keeps the bits it gets alone. */
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
            const __m256i p = dot_u8s8(is_signed ? _mm256_sign_epi8(q, q) : q,
                                       is_signed ? _mm256_sign_epi8(xb, q) : xb);
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
                        int64_t ldy) {  /* (one row of x goes through block32_one_row: ROWS_PAIRED) */
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

#endif
