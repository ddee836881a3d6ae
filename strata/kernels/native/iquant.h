/* The i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): their GGUF block layouts, the code
 * books they index, and a portable decode of a superblock into its fields (quant_scalar.c and dequant_scalar.c
 * build on it; iquant_simd.h reads the same bytes with vectors).
 *
 * A superblock of 256 values is rows of a grid (8 values a row; IQ3's 4), each row's values times a sign (IQ1:
 * plus a shift delta = +-1/8), times d and a scale per 16 or 32 values. The grids are gguf-py's, copied here
 * once by strata_qmm_set_iq_tables (cpu_quant.py builds them with gguf.quants.<type>.init_grid()); until then
 * strata_qmm_supports says no for these types. Every grid value is a small integer (IQ2: 8, 25, 43; IQ3_XXS:
 * 4..62; IQ3_S: 1..15; IQ1: -1, 0, 1; strata_qmm_set_iq_tables refuses any past 63), so each weight is an exact
 * float32 product (iquant_simd.h) and an int8 one: w = unit * k * n with unit = d / 8 (IQ2, IQ1), d / 4
 * (IQ3_XXS) or d (IQ3_S), k = 2 s + 1 the sub-block's odd scale and n = sign * g (IQ1: 8 g +- 1). */
#ifndef STRATA_IQUANT_H
#define STRATA_IQUANT_H

#include "quant_matmul.h"

/* IQ2_XXS: 8 groups of 32 values of 8 bytes each: 4 grid row indices, then a uint32 whose bits 7k..7k+6 are
 * row k's sign code (ksigns) and whose top 4 bits are the group's scale */
typedef struct { uint16_t d; uint8_t qs[64]; } block_iq2_xxs;  /* 66 */
/* IQ2_XS: a uint16 a row (a 9-bit index, the 7-bit sign code above it); scales: a nibble per 16 values, low
 * first */
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } block_iq2_xs;  /* 74 */
/* IQ2_S: the indices' low 8 bits, a sign byte a row (bit i: value i negative), the indices' top 2 bits (row r
 * at bits 2 (r % 4) of qh[r / 4]), scales as IQ2_XS's */
typedef struct { uint16_t d; uint8_t qs[32], signs[32], qh[8], scales[8]; } block_iq2_s;  /* 82 */
/* IQ3_XXS: 64 indices of rows of 4, then a uint32 a group of 32 values laid out as IQ2_XXS's (a sign code for
 * each 8 values: two rows) */
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t signs_scales[32]; } block_iq3_xxs;  /* 98 */
/* IQ3_S: the indices' low 8 bits (rows of 4), their ninth bits (row r: bit r % 8 of qh[r / 8]), a sign byte
 * each 8 values, a scale nibble each 32 values (low first) */
typedef struct { uint16_t d; uint8_t qs[64], qh[8], signs[32], scales[4]; } block_iq3_s;  /* 110 */
/* IQ1_S: the indices' low 8 bits, then a uint16 a group of 32 values: the top 3 bits of its 4 rows' indices
 * (bits 3k..), its scale (bits 12-14) and its delta's sign (bit 15: set means -1/8) */
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } block_iq1_s;  /* 50 */
/* IQ1_M: the indices' low 8 bits, a nibble a row (low first: the index's top 3 bits, then the delta's sign),
 * then 4 uint16 of four 3-bit scales (one each 16 values) whose top nibbles are the float16 d, low bits first */
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint16_t scales[4]; } block_iq1_m;  /* 56 */

_Static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
                   sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110 && sizeof(block_iq1_s) == 50 &&
                   sizeof(block_iq1_m) == 56,
               "i-quant block structs must have GGUF's sizes (no padding)");

/* gguf-py's code books (strata_qmm_set_iq_tables): row i of each grid is the values of index i */
typedef struct {
    int8_t iq2_xxs[256][8], iq2_xs[512][8], iq2_s[1024][8], iq1_s[2048][8];  /* IQ1_M reads IQ1_S's */
    int8_t iq3_xxs[256][4], iq3_s[512][4];
    uint8_t ksigns[128];  /* 7-bit sign code -> the 8 sign bits (the eighth makes the count of minus signs even) */
} iq_tables_t;
extern iq_tables_t strata_iq __attribute__((visibility("hidden")));  /* one library: no GOT lookups */

static inline uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline int is_iq1(int qtype) { return qtype == T_IQ1_S || qtype == T_IQ1_M; }

/* w = d * unit * k * n (see the top): the unit of each type */
static inline float iq_unit(int qtype) { return qtype == T_IQ3_S ? 1.f : qtype == T_IQ3_XXS ? .25f : .125f; }

/* values a grid row: 4 for IQ3_*, else 8 */
static inline int iq_row_width(int qtype) { return qtype == T_IQ3_XXS || qtype == T_IQ3_S ? 4 : 8; }

static inline const int8_t *iq_grid_row(int qtype, int index) {
    switch (qtype) {
    case T_IQ2_XXS: return strata_iq.iq2_xxs[index];
    case T_IQ2_XS: return strata_iq.iq2_xs[index];
    case T_IQ2_S: return strata_iq.iq2_s[index];
    case T_IQ3_XXS: return strata_iq.iq3_xxs[index];
    case T_IQ3_S: return strata_iq.iq3_s[index];
    default: return strata_iq.iq1_s[index];
    }
}

static inline uint16_t iq1_m_d(const block_iq1_m *b) {  /* the float16 d, from the scales' top nibbles */
    return (uint16_t)((b->scales[0] >> 12) | ((b->scales[1] >> 8) & 0xF0) | ((b->scales[2] >> 4) & 0xF00) |
                      (b->scales[3] & 0xF000));
}

/* A superblock's fields, in value order */
typedef struct {
    float d;
    uint16_t index[64];  /* grid rows: 32 of 8 values, or 64 of 4 */
    uint8_t signs[32];   /* bit i of byte j: value 8j + i negative; IQ1_*: every bit of the byte is its delta's sign */
    uint8_t scales[16];  /* the scale field s of each 16 values */
} iq_fields_t;

/* ksigns of the four 7-bit codes of a uint32 (bits 7k..7k+6) -> signs[0..3] */
static inline void iq_ksigns4(uint32_t codes, uint8_t *signs) {
    for (int k = 0; k < 4; k++) signs[k] = strata_iq.ksigns[(codes >> (7 * k)) & 127];
}

static inline void iq_fields(int qtype, const uint8_t *blk, iq_fields_t *f) {
    switch (qtype) {
    case T_IQ2_XXS: {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        f->d = fp16_to_f32(b->d);
        for (int j = 0; j < 8; j++) {
            const uint32_t aux = le32(b->qs + 8 * j + 4);
            for (int k = 0; k < 4; k++) f->index[4 * j + k] = b->qs[8 * j + k];
            iq_ksigns4(aux, f->signs + 4 * j);
            f->scales[2 * j] = f->scales[2 * j + 1] = (uint8_t)(aux >> 28);
        }
        break;
    }
    case T_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)blk;
        f->d = fp16_to_f32(b->d);
        for (int r = 0; r < 32; r++) f->index[r] = b->qs[r] & 511, f->signs[r] = strata_iq.ksigns[b->qs[r] >> 9];
        for (int m = 0; m < 16; m++) f->scales[m] = (b->scales[m / 2] >> (4 * (m % 2))) & 15;
        break;
    }
    case T_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)blk;
        f->d = fp16_to_f32(b->d);
        for (int r = 0; r < 32; r++)
            f->index[r] = (uint16_t)(b->qs[r] | ((b->qh[r / 4] >> (2 * (r % 4))) & 3) << 8), f->signs[r] = b->signs[r];
        for (int m = 0; m < 16; m++) f->scales[m] = (b->scales[m / 2] >> (4 * (m % 2))) & 15;
        break;
    }
    case T_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        f->d = fp16_to_f32(b->d);
        for (int r = 0; r < 64; r++) f->index[r] = b->qs[r];
        for (int j = 0; j < 8; j++) {
            const uint32_t aux = le32(b->signs_scales + 4 * j);
            iq_ksigns4(aux, f->signs + 4 * j);
            f->scales[2 * j] = f->scales[2 * j + 1] = (uint8_t)(aux >> 28);
        }
        break;
    }
    case T_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        f->d = fp16_to_f32(b->d);
        for (int r = 0; r < 64; r++) f->index[r] = (uint16_t)(b->qs[r] | ((b->qh[r / 8] >> (r % 8)) & 1) << 8);
        memcpy(f->signs, b->signs, 32);
        for (int j = 0; j < 8; j++) f->scales[2 * j] = f->scales[2 * j + 1] = (b->scales[j / 2] >> (4 * (j % 2))) & 15;
        break;
    }
    case T_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)blk;
        f->d = fp16_to_f32(b->d);
        for (int r = 0; r < 32; r++) {
            const uint16_t qh = b->qh[r / 4];
            f->index[r] = (uint16_t)(b->qs[r] | ((qh >> (3 * (r % 4))) & 7) << 8);
            f->signs[r] = qh >> 15 ? 0xFF : 0;
        }
        for (int m = 0; m < 16; m++) f->scales[m] = (b->qh[m / 2] >> 12) & 7;
        break;
    }
    default: {  /* IQ1_M */
        const block_iq1_m *b = (const block_iq1_m *)blk;
        f->d = fp16_to_f32(iq1_m_d(b));
        for (int r = 0; r < 32; r++) {
            const int nibble = b->qh[r / 2] >> (4 * (r % 2));
            f->index[r] = (uint16_t)(b->qs[r] | (nibble & 7) << 8);
            f->signs[r] = nibble & 8 ? 0xFF : 0;
        }
        for (int m = 0; m < 16; m++) f->scales[m] = (b->scales[m / 4] >> (3 * (m % 4))) & 7;
        break;
    }
    }
}

/* whether value e's sign bit is set */
static inline int iq_negative(const iq_fields_t *f, int e) { return (f->signs[e / 8] >> (e % 8)) & 1; }

#endif
