/* The AVX-512 table's Q4_K, Q5_K and Q6_K, included by quant_simd.c in its AVX-512 build in place of its 256-bit
 * ones, after the superblock helpers they share (scale_row, scale_min_bytes_k4, min_terms_k4, scaled_bytes16).
 * 64 values a vector (two sub-blocks of 32: their quants side by side in value order, and x's 64 bytes as they lie),
 * so a row of a tile takes half the loads, multiplies and adds of the 256-bit kernels, and a superblock half their
 * decoding. A row's integer sum is folded to the 8 lanes those build (lane i of each half holds values 4i..4i+3 of
 * its sub-block: adding the halves sums exact integers) and then scaled by the same float operations, so each
 * output has the AVX2 table's bits, alone or in a batch (tests/kernels/test_cpu_quant.py holds them to that). */
#ifndef STRATA_QUANT_SIMD_KQUANTS512_H
#define STRATA_QUANT_SIMD_KQUANTS512_H

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

/* Q4_K, or Q5_K (fifth bits: its qh, bit j of qh[l] being bit 4 of value l of sub-block j = 2c, 2c + 1) */
INLINE void k4_row512(const uint8_t *w, const int fifth_bits, const acts_t *x, int64_t t0, const int nt, float *y,
                      int64_t ldy) {
    __m256 acc[MAX_T];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q4_k *q4 = (const block_q4_k *)w + b;
        const block_q5_k *q5 = (const block_q5_k *)w + b;  /* d, dmin and scales where Q4_K has them */
        __m512i wv[4], scale[4];
        const __m256 min_terms = fifth_bits ? decode_k4_512(q5->scales, f16(q5->dmin), q5->qs, wv, scale)
                                            : decode_k4_512(q4->scales, f16(q4->dmin), q4->qs, wv, scale);
        if (fifth_bits) {
            const __m512i qh = _mm512_broadcast_i64x4(load32(q5->qh));
            for (int c = 0; c < 4; c++) {
                const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, halves_select(2 * c, 2 * c + 1)),
                                                     _mm512_set1_epi8(1));
                wv[c] = _mm512_or_si512(wv[c], _mm512_slli_epi16(bit, 4));
            }
        }
        superblock_rows512(wv, scale, f16(fifth_bits ? q5->d : q4->d), 8, &min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}

INLINE void q4_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    k4_row512(w, 0, x, t0, nt, y, ldy);
}

INLINE void q5_k_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y, int64_t ldy) {
    k4_row512(w, 1, x, t0, nt, y, ldy);
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
            const long long w0 = 0x0001000100010001LL * (4 * c);  /* word 4c in each 16-bit lane of 64 bits */
            const __m512i pick = _mm512_set_epi64(w0 + 3 * 0x0001000100010001LL, w0 + 3 * 0x0001000100010001LL,
                                                  w0 + 2 * 0x0001000100010001LL, w0 + 2 * 0x0001000100010001LL,
                                                  w0 + 0x0001000100010001LL, w0 + 0x0001000100010001LL, w0, w0);
            scale[c] = _mm512_permutexvar_epi16(pick, words);
        }
        const float d = f16(blk->d);
        __m256 min_terms[2];
        scaled_bytes16(scales, -32.f * d, min_terms);
        superblock_rows512(wv, scale, d, 16, min_terms, x, t0, nt, b, acc);
    }
    store_rows(acc, nt, y, ldy);
}
#endif
