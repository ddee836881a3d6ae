/* The i-quant superblocks (iquant.h) read with AVX2, for quant_simd.c (int8 dot products) and dequant_simd.c
 * (exact float32 weights): a group of 32 values as |n| and the signs of n (n = sign * g; IQ1_*: 8 g +- 1), the 16
 * odd scales k = 2 s + 1 as bytes, w = d * unit * k * n. The indices are worked out in general registers and each
 * grid row is loaded by two 8-byte loads a half (4-byte inserts for IQ3's rows of 4), the 7-bit sign codes the
 * same way from ksign_bytes; sign bytes (IQ2_S, IQ3_S) become +-1 by one shuffle. On the 2-core Zen 4, one row of
 * x times a 5632 x 2048 IQ2_XXS weight on one thread took 1.42 ms with vpgatherdq and sign bits spread by shuffle,
 * 0.97 ms so (Q4_K: 0.30). The bytes of each block are iquant.h's; iq_fields there states the same decode. */
#ifndef STRATA_IQUANT_SIMD_H
#define STRATA_IQUANT_SIMD_H

#include <immintrin.h>

#include "iquant.h"

#define IQ_INLINE static inline __attribute__((always_inline))

/* bytes of -1 where they have `bit` (a mask a byte) in the byte of `word` that `pick` selects (vpshufb: in each
 * 128-bit half), else +1 */
IQ_INLINE __m256i iq_bit_signs(uint32_t word, __m256i pick, __m256i bit) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)word), pick);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1));
}

IQ_INLINE __m256i iq_signs32(uint32_t bits) {  /* byte 8b + i: -1 where bit i of byte b of `bits` is set, else +1 */
    return iq_bit_signs(bits, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
                        _mm256_set1_epi64x((int64_t)0x8040201008040201));
}

/* grid rows a, b, c, d of 8 values -> one vector (two 8-byte loads a half: cheaper here than a gather) */
IQ_INLINE __m256i iq_rows8(const int8_t *a, const int8_t *b, const int8_t *c, const int8_t *d) {
    const __m128d lo = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)a)), (const double *)b);
    const __m128d hi = _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)c)), (const double *)d);
    return _mm256_set_m128i(_mm_castpd_si128(hi), _mm_castpd_si128(lo));
}

/* grid rows a, b, c, d of 4 values -> one half vector */
IQ_INLINE __m128i iq_rows4(const int8_t *a, const int8_t *b, const int8_t *c, const int8_t *d) {
    __m128i v = _mm_cvtsi32_si128((int)le32((const uint8_t *)a));
    v = _mm_insert_epi32(v, (int)le32((const uint8_t *)b), 1);
    v = _mm_insert_epi32(v, (int)le32((const uint8_t *)c), 2);
    return _mm_insert_epi32(v, (int)le32((const uint8_t *)d), 3);
}

/* the +-1 bytes of the four 7-bit sign codes of a uint32 (bits 7k..7k+6) */
IQ_INLINE __m256i iq_code_signs(uint32_t codes) {
    const int8_t (*ks)[8] = strata_iq.ksign_bytes;
    return iq_rows8(ks[codes & 127], ks[(codes >> 7) & 127], ks[(codes >> 14) & 127], ks[(codes >> 21) & 127]);
}

/* values 32j .. 32j + 31 of the superblock at blk: returns |n|, *signs = bytes of n's sign (+-1, or n itself) */
IQ_INLINE __m256i iq_group(const int qtype, const uint8_t *blk, int j, __m256i *signs) {
    switch (qtype) {
    case T_IQ2_XXS: {
        const uint8_t *q = ((const block_iq2_xxs *)blk)->qs + 8 * j;
        const int8_t (*g)[8] = strata_iq.iq2_xxs;
        *signs = iq_code_signs(le32(q + 4));
        return iq_rows8(g[q[0]], g[q[1]], g[q[2]], g[q[3]]);
    }
    case T_IQ2_XS: {
        const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * j;
        const int8_t (*g)[8] = strata_iq.iq2_xs;
        const int8_t (*ks)[8] = strata_iq.ksign_bytes;
        *signs = iq_rows8(ks[q[0] >> 9], ks[q[1] >> 9], ks[q[2] >> 9], ks[q[3] >> 9]);
        return iq_rows8(g[q[0] & 511], g[q[1] & 511], g[q[2] & 511], g[q[3] & 511]);
    }
    case T_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        const uint8_t *q = b->qs + 4 * j;
        const int8_t (*g)[8] = strata_iq.iq2_s;
        const int qh = b->qh[j];
        *signs = iq_signs32(le32(b->signs + 4 * j));
        return iq_rows8(g[q[0] | (qh & 3) << 8], g[q[1] | (qh & 12) << 6], g[q[2] | (qh & 48) << 4],
                        g[q[3] | (qh & 192) << 2]);
    }
    case T_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint8_t *q = b->qs + 8 * j;
        const int8_t (*g)[4] = strata_iq.iq3_xxs;
        *signs = iq_code_signs(le32(b->signs_scales + 4 * j));
        return _mm256_set_m128i(iq_rows4(g[q[4]], g[q[5]], g[q[6]], g[q[7]]),
                                iq_rows4(g[q[0]], g[q[1]], g[q[2]], g[q[3]]));
    }
    case T_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const uint8_t *q = b->qs + 8 * j;
        const int8_t (*g)[4] = strata_iq.iq3_s;
        const int qh = b->qh[j];
        *signs = iq_signs32(le32(b->signs + 4 * j));
        const __m128i lo = iq_rows4(g[q[0] | (qh & 1) << 8], g[q[1] | (qh & 2) << 7], g[q[2] | (qh & 4) << 6],
                                    g[q[3] | (qh & 8) << 5]);
        const __m128i hi = iq_rows4(g[q[4] | (qh & 16) << 4], g[q[5] | (qh & 32) << 3], g[q[6] | (qh & 64) << 2],
                                    g[q[7] | (qh & 128) << 1]);
        return _mm256_set_m128i(hi, lo);
    }
    case T_IQ1_S: {  /* n = 8 g (g -1, 0 or 1) + the group's delta as +-1, never 0 */
        const block_iq1_s *b = (const block_iq1_s *)blk;
        const uint8_t *q = b->qs + 4 * j;
        const int8_t (*g)[8] = strata_iq.iq1_s;
        const int qh = b->qh[j];
        const __m256i rows = iq_rows8(g[q[0] | (qh & 7) << 8], g[q[1] | (qh & 0x38) << 5],
                                      g[q[2] | (qh & 0x1C0) << 2], g[q[3] | (qh & 0xE00) >> 1]);
        *signs = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), rows), _mm256_set1_epi8(qh >> 15 ? -1 : 1));
        return _mm256_sign_epi8(*signs, *signs);
    }
    default: {  /* IQ1_M: as IQ1_S, a delta a row (bit 3 of its nibble) */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        const uint8_t *q = b->qs + 4 * j;
        const int8_t (*g)[8] = strata_iq.iq1_s;
        const int qh = b->qh[2 * j] | b->qh[2 * j + 1] << 8;  /* the 4 rows' nibbles */
        const __m256i rows = iq_rows8(g[q[0] | (qh & 7) << 8], g[q[1] | (qh & 0x70) << 4], g[q[2] | (qh & 0x700)],
                                      g[q[3] | (qh & 0x7000) >> 4]);
        /* rows 0 and 1 read byte 0 of qh, rows 2 and 3 byte 1; even rows bit 3, odd rows bit 7 */
        const __m256i pick = _mm256_set_epi64x(0x0101010101010101, 0x0101010101010101, 0, 0);
        const __m256i bit = _mm256_set_epi64x((int64_t)0x8080808080808080, 0x0808080808080808,
                                              (int64_t)0x8080808080808080, 0x0808080808080808);
        const __m256i delta = iq_bit_signs((uint32_t)qh, pick, bit);
        *signs = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), rows), delta);
        return _mm256_sign_epi8(*signs, *signs);
    }
    }
}

/* (s of 8 groups of 32, each the top 4 bits of a uint32 `stride` bytes apart: 4, IQ3_XXS's contiguous words, or
 * 8, IQ2_XXS's second word of each group's 8 bytes) -> 16 bytes, each twice; in vectors, not 8 scalar extracts */
IQ_INLINE __m128i iq_top_nibbles(const uint8_t *aux, int stride) {
    __m128i words, order;  /* the 8 values as int16 words, and the byte shuffle that puts s_j in bytes 2j, 2j + 1 */
    if (stride == 4) {
        const __m256i top = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)aux), 28);  /* s_j in dword j */
        words = _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
        order = _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
    } else {  /* the words at aux + 8j are the high halves of 8 uint64 from aux - 4 */
        const __m256i low = _mm256_srli_epi64(_mm256_loadu_si256((const __m256i *)(aux - 4)), 60);  /* s_0..s_3 */
        const __m256i high = _mm256_srli_epi64(_mm256_loadu_si256((const __m256i *)(aux + 28)), 60); /* s_4..s_7 */
        const __m256i both = _mm256_or_si256(low, _mm256_slli_epi64(high, 32));  /* dwords s0 s4 s1 s5 | s2 s6 s3 s7 */
        words = _mm_packus_epi32(_mm256_castsi256_si128(both), _mm256_extracti128_si256(both, 1));
        order = _mm_setr_epi8(0, 0, 4, 4, 8, 8, 12, 12, 2, 2, 6, 6, 10, 10, 14, 14);
    }
    return _mm_shuffle_epi8(words, order);
}

IQ_INLINE __m128i iq_nibbles(__m128i bytes) {  /* bytes -> their low nibbles interleaved with their high ones */
    const __m128i mask = _mm_set1_epi8(0xF);
    return _mm_unpacklo_epi8(_mm_and_si128(bytes, mask), _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
}

/* the 16 odd scales k = 2 s + 1 of the superblock at blk (one each 16 values) as bytes; *d_unit = d * unit */
IQ_INLINE __m128i iq_scales(const int qtype, const uint8_t *blk, float *d_unit) {
    __m128i s;
    uint16_t d;
    switch (qtype) {
    case T_IQ2_XXS:
        s = iq_top_nibbles(((const block_iq2_xxs *)blk)->qs + 4, 8), d = ((const block_iq2_xxs *)blk)->d;
        break;
    case T_IQ3_XXS:
        s = iq_top_nibbles(((const block_iq3_xxs *)blk)->signs_scales, 4), d = ((const block_iq3_xxs *)blk)->d;
        break;
    case T_IQ2_XS:
        s = iq_nibbles(_mm_loadl_epi64((const __m128i *)((const block_iq2_xs *)blk)->scales));
        d = ((const block_iq2_xs *)blk)->d;
        break;
    case T_IQ2_S:
        s = iq_nibbles(_mm_loadl_epi64((const __m128i *)((const block_iq2_s *)blk)->scales));
        d = ((const block_iq2_s *)blk)->d;
        break;
    case T_IQ3_S: {  /* one nibble each 32 values: each twice */
        const __m128i nibbles = iq_nibbles(_mm_cvtsi32_si128((int)le32(((const block_iq3_s *)blk)->scales)));
        s = _mm_unpacklo_epi8(nibbles, nibbles), d = ((const block_iq3_s *)blk)->d;
        break;
    }
    case T_IQ1_S: {  /* bits 12-14 of each uint16 (one each 32 values) into both of its bytes */
        const __m128i words = _mm_loadu_si128((const __m128i *)((const block_iq1_s *)blk)->qh);
        s = _mm_mullo_epi16(_mm_and_si128(_mm_srli_epi16(words, 12), _mm_set1_epi16(7)), _mm_set1_epi16(0x0101));
        d = ((const block_iq1_s *)blk)->d;
        break;
    }
    default: {  /* IQ1_M: four 3-bit fields a uint16 */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        uint64_t half[2] = {0, 0};
        for (int m = 0; m < 16; m++)
            half[m / 8] |= (uint64_t)((b->scales[m / 4] >> (3 * (m % 4))) & 7) << (8 * (m % 8));
        s = _mm_set_epi64x((int64_t)half[1], (int64_t)half[0]), d = iq1_m_d(b);
        break;
    }
    }
    *d_unit = _cvtsh_ss(d) * iq_unit(qtype);
    return _mm_add_epi8(_mm_add_epi8(s, s), _mm_set1_epi8(1));
}

/* A superblock decoded: n = signs * magnitude group by group */
typedef struct {
    __m256i magnitude[8], signs[8];
    __m128i k;     /* the 16 odd scales */
    float d_unit;  /* d * unit */
} iq_superblock_t;

/* iq_decode_<type>: one copy a type, not one in every kernel body that reads it (8 row counts x 2 instruction sets,
 * dequant_simd.c's passes): inlined, they took quant_simd.c's build from 4.0 to 10.5 s, for no speed */
#define IQ_DECODER(name, id)                                                                                  \
    static __attribute__((noinline)) void iq_decode_##name(const uint8_t *blk, iq_superblock_t *sb) {         \
        sb->k = iq_scales(id, blk, &sb->d_unit);                                                              \
        for (int j = 0; j < 8; j++) sb->magnitude[j] = iq_group(id, blk, j, &sb->signs[j]);                   \
    }
IQ_TYPES(IQ_DECODER)
#undef IQ_DECODER

#endif
