/* The i-quant superblocks (iquant.h) read with AVX2, for quant_simd.c (int8 dot products) and dequant_simd.c
 * (exact float32 weights): a group of 32 values as |n| and the signs of n (n = sign * g; IQ1_*: 8 g +- 1), the 16
 * odd scales k = 2 s + 1 as bytes, w = d * unit * k * n. The indices are worked out in general registers and each
 * grid row is loaded by two 8-byte loads a half (4-byte inserts for IQ3's rows of 4). The signs of a superblock are
 * its 256 sign bits, in vectors: the 7-bit sign codes of IQ2_XXS, IQ2_XS and IQ3_XXS get their eighth bit (even
 * parity) by xor folds, not a table load a code, and each group's 32 bits become +-1 bytes by one shuffle. On the
 * 2-core Zen 4, one row of x times a 5632 x 2048 IQ2_XXS weight on one thread took 1.42 ms with vpgatherdq and sign
 * bits spread by shuffle, 0.97 ms so (Q4_K: 0.30); sign codes by parity instead of table rows: see iq_sign_bits.
 * The bytes of each block are iquant.h's; iq_fields there states the same decode. */
#ifndef STRATA_IQUANT_SIMD_H
#define STRATA_IQUANT_SIMD_H

#include <immintrin.h>

#include "iquant.h"

#define IQ_INLINE static inline __attribute__((always_inline))

/* bytes of -1 where they have `bit` (a mask a byte) in the byte of `words` (a 32-bit word in every lane) that
 * `pick` selects (vpshufb: in each 128-bit half), else +1 */
IQ_INLINE __m256i iq_bit_signs(__m256i words, __m256i pick, __m256i bit) {
    const __m256i spread = _mm256_shuffle_epi8(words, pick);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1));
}

IQ_INLINE __m256i iq_signs32(uint32_t bits) {  /* byte 8b + i: -1 where bit i of byte b of `bits` is set, else +1 */
    return iq_bit_signs(_mm256_set1_epi32((int)bits),
                        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
                        _mm256_set1_epi64x((int64_t)0x8040201008040201));
}

/* bytes holding 7-bit sign codes -> gguf's sign bytes (ksigns): bit 7 set where the code has an odd number of ones,
 * so each 8 values have an even number of minus signs */
IQ_INLINE __m256i iq_code_parity(__m256i codes) {
    __m256i fold = _mm256_xor_si256(codes, _mm256_srli_epi32(codes, 4));  /* bit 0 of each byte, below: its parity */
    fold = _mm256_xor_si256(fold, _mm256_srli_epi32(fold, 2));
    fold = _mm256_xor_si256(fold, _mm256_srli_epi32(fold, 1));
    return _mm256_or_si256(codes, _mm256_slli_epi32(_mm256_and_si256(fold, _mm256_set1_epi8(1)), 7));
}

/* The superblock's 256 sign bits (byte s: values 8s .. 8s + 7, bit i set where value 8s + i is negative) from the
 * sign codes of IQ2_XXS / IQ3_XXS (a uint32 a group of 32 values, code r at bits 7r) and IQ2_XS (bits 9-15 of each
 * row's uint16), at `bits`; other types have none (IQ2_S / IQ3_S: their sign bytes are these bits; IQ1_*: in the
 * grid). On the Zen 4 a table row a code (4 extracts, 4 loads and their inserts a group) was slower: see
 * docs/benchmarks.md, session 52. */
IQ_INLINE void iq_sign_bits(const int qtype, const uint8_t *blk, uint32_t *bits) {
    __m256i v;
    switch (qtype) {
    case T_IQ2_XXS:
    case T_IQ3_XXS: {
        __m256i words;  /* dword j: group j's uint32 */
        if (qtype == T_IQ2_XXS) {  /* the second uint32 of each group's 8 bytes: dwords 1 and 3 of each 16 */
            const uint8_t *qs = ((const block_iq2_xxs *)blk)->qs;
            const __m256 lo = _mm256_loadu_ps((const float *)qs), hi = _mm256_loadu_ps((const float *)(qs + 32));
            /* dwords g0 g1 g4 g5 | g2 g3 g6 g7, then in order */
            words = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8);
        } else {
            words = _mm256_loadu_si256((const __m256i *)((const block_iq3_xxs *)blk)->signs_scales);
        }
        __m256i codes = _mm256_and_si256(words, _mm256_set1_epi32(0x7F));  /* code r -> byte r */
        codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(words, 1), _mm256_set1_epi32(0x7F00)));
        codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(words, 2), _mm256_set1_epi32(0x7F0000)));
        codes = _mm256_or_si256(codes, _mm256_and_si256(_mm256_slli_epi32(words, 3), _mm256_set1_epi32(0x7F000000)));
        v = iq_code_parity(codes);
        break;
    }
    case T_IQ2_XS: {  /* each uint16's top 7 bits, packed to bytes: rows 0-7, 16-23 | 8-15, 24-31, then in order */
        const uint16_t *qs = ((const block_iq2_xs *)blk)->qs;
        const __m256i lo = _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)qs), 9);
        const __m256i hi = _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(qs + 16)), 9);
        v = iq_code_parity(_mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), 0xD8));
        break;
    }
    default: return;
    }
    _mm256_storeu_si256((__m256i *)bits, v);
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

/* values 32j .. 32j + 31 of the superblock at blk: returns |n|, *signs = bytes of n's sign (+-1, or n itself);
 * sign_bits: iq_sign_bits's of the superblock (IQ2_XXS, IQ2_XS, IQ3_XXS) */
IQ_INLINE __m256i iq_group(const int qtype, const uint8_t *blk, int j, const uint32_t *sign_bits, __m256i *signs) {
    switch (qtype) {
    case T_IQ2_XXS: {
        const uint8_t *q = ((const block_iq2_xxs *)blk)->qs + 8 * j;
        const int8_t (*g)[8] = strata_iq.iq2_xxs;
        *signs = iq_signs32(sign_bits[j]);
        return iq_rows8(g[q[0]], g[q[1]], g[q[2]], g[q[3]]);
    }
    case T_IQ2_XS: {
        const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * j;
        const int8_t (*g)[8] = strata_iq.iq2_xs;
        *signs = iq_signs32(sign_bits[j]);
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
        *signs = iq_signs32(sign_bits[j]);
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
        const __m256i delta = iq_bit_signs(_mm256_set1_epi32(qh), pick, bit);
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
        uint32_t sign_bits[8];                                                                                \
        iq_sign_bits(id, blk, sign_bits);                                                                     \
        sb->k = iq_scales(id, blk, &sb->d_unit);                                                              \
        for (int j = 0; j < 8; j++) sb->magnitude[j] = iq_group(id, blk, j, sign_bits, &sb->signs[j]);        \
    }
IQ_TYPES(IQ_DECODER)
#undef IQ_DECODER

#endif
