/* Shared by the drivers (quant_matmul.c, quant_moe.c, offload_host_part.c, dequant_matmul.c) and the kernels
 * (quant_scalar.c, quant_simd.c compiled once per instruction set; dequant_scalar.c, dequant_simd.c): the GGUF block
 * layouts (the i-quants' in iquant.h), the quantized activations, the kernel signatures, and what
 * quant_matmul.c lends the other drivers (the activation quantizer, the thread pool, the kernel tables).
 *
 * Activations are quantized per block to int8 with a float32 scale, x ~= d * q, q = rint(x * 127 / amax),
 * over QB = 32 values for the 32-value weight types (Q8_0, Q4_*, Q5_0, Q5_1, IQ4_NL, MXFP4) and QB = 256 for the
 * 256-value ones (K-quants, IQ4_XS, the i-quants), so each weight block meets one activation scale. bsum holds
 * d * sum(q) over every 32 values (what a weight block's minimum multiplies). The scales and bsum are stored
 * transposed in tiles of MAX_T rows, [T / MAX_T][blocks][MAX_T], so that one vector of them serves every row of
 * a tile; bsum also by row, [T][K / 32], for the superblocks' 8 sub-blocks (one vector a row), and bsum16 by row,
 * [T][K / 16], d * sum(q) over every 16 values, for the 16 sub-blocks of Q2_K (their minimums) and Q3_K (its
 * -4 offset, taken as a minimum by quant_simd.c). */
#ifndef STRATA_QUANT_MATMUL_H
#define STRATA_QUANT_MATMUL_H

#include <stdint.h>
#include <string.h>

enum { QK = 32, QK_K = 256, MAX_T = 8 };

/* GGML type ids (gguf.GGMLQuantizationType) */
enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13,
       T_Q6_K = 14, T_IQ2_XXS = 16, T_IQ2_XS = 17, T_IQ3_XXS = 18, T_IQ1_S = 19, T_IQ4_NL = 20, T_IQ3_S = 21,
       T_IQ2_S = 22, T_IQ4_XS = 23, T_IQ1_M = 29, T_MXFP4 = 39, NUM_TYPES = 40 };

/* Every type with a kernel, as (name, id): each kernel file defines rows_<name> and fills its table from it */
#define QMM_TYPES(X) X(q8_0, T_Q8_0) X(q4_0, T_Q4_0) X(q4_1, T_Q4_1) X(q5_0, T_Q5_0) X(q5_1, T_Q5_1) \
                     X(q2_k, T_Q2_K) X(q3_k, T_Q3_K) X(q4_k, T_Q4_K) X(q5_k, T_Q5_K) X(q6_k, T_Q6_K)       \
                     X(iq4_nl, T_IQ4_NL) X(iq4_xs, T_IQ4_XS) X(mxfp4, T_MXFP4) IQ_TYPES(X)
/* the grid types of iquant.h (supported once strata_qmm_set_iq_tables has their grids) */
#define IQ_TYPES(X) X(iq2_xxs, T_IQ2_XXS) X(iq2_xs, T_IQ2_XS) X(iq2_s, T_IQ2_S) X(iq3_xxs, T_IQ3_XXS)      \
                    X(iq3_s, T_IQ3_S) X(iq1_s, T_IQ1_S) X(iq1_m, T_IQ1_M)
#define QMM_ROWS(name, id) ROWS(name)
#define QMM_TABLE_ENTRY(name, id) table[id] = rows_##name;

typedef struct { uint16_t d; int8_t qs[QK]; } block_q8_0;                      /* 34 bytes */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } block_q4_0;                 /* 18: value i = qs[i%16] nibble i/16 */
typedef block_q4_0 block_iq4_nl;  /* 18: Q4_0's layout, w = d * IQ4_VALUES[code] (i-quant files' 32-value rows) */
typedef struct { uint16_t d, m; uint8_t qs[QK / 2]; } block_q4_1;              /* 20 */
/* Q5_*: qh is a little-endian uint32 whose bit i is bit 4 of value i; qs as Q4_0's */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_0;   /* 22 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_1; /* 24 */
/* Q2_K / Q3_K: value h*128 + s*32 + l (half h, quarter s) has its 2 low bits at qs[h*32 + l] >> 2s; 16 sub-blocks
 * of 16. Q2_K's scales[j]: the 4-bit scale of sub-block j (low nibble) and its 4-bit min (high). Q3_K: bit s of
 * hmask[l] is value s*32 + l's third bit (clear: minus 4); scales as q3_k_scales unpacks them */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_k;  /* 84 */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_k;  /* 110 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_k;  /* 144 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_k;  /* 176 */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_k;  /* 210 */
typedef struct { uint16_t d, scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;  /* 136 */
/* MXFP4: an E8M0 exponent e (scale 2^(e - 128) for the doubled values), then Q4_0's nibbles as codes of MXFP4_VALUES */
typedef struct { uint8_t e; uint8_t qs[QK / 2]; } block_mxfp4;  /* 17 */

_Static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 &&
                   sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24 && sizeof(block_q2_k) == 84 &&
                   sizeof(block_q3_k) == 110 &&
                   sizeof(block_q4_k) == 144 && sizeof(block_q5_k) == 176 && sizeof(block_q6_k) == 210 &&
                   sizeof(block_iq4_xs) == 136 && sizeof(block_mxfp4) == 17,
               "block structs must have GGUF's sizes (no padding)");

static const int8_t IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* E2M1's values doubled (gguf-py's MXFP4.kvalues); mxfp4_scale halves the block's power of two to match */
static const int8_t MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float mxfp4_scale(uint8_t e) {  /* 2^(e - 128) as gguf-py's e8m0_to_fp32_half: subnormal below e = 2 */
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

typedef struct {  /* written by strata_qmm_quantize_row, read by the kernels */
    int8_t *q;           /* [T, K] */
    float *d;            /* [ceil(T / MAX_T), K / QB, MAX_T] */
    float *bsum;         /* [ceil(T / MAX_T), K / 32, MAX_T] */
    float *bsum_rows;    /* [T, K / 32] */
    float *bsum16_rows;  /* [T, K / 16] */
    int64_t k, qb;
} acts_t;

/* the scale of block b (of QB values) of row t, and d * sum(q) of its 32 values j */
static inline const float *d_at(const acts_t *x, int64_t t, int64_t b) {
    return x->d + ((t / MAX_T) * (x->k / x->qb) + b) * MAX_T + t % MAX_T;
}

static inline const float *bsum_at(const acts_t *x, int64_t t, int64_t j) {
    return x->bsum + ((t / MAX_T) * (x->k / QK) + j) * MAX_T + t % MAX_T;
}

/* y[t * ldy + r] = row r of the weight (rows of row_bytes from w) . activation row t0 + t, for r < rows
 * and t < nt <= MAX_T; t0 is a multiple of MAX_T (a tile). */
typedef void (*rows_fn)(const uint8_t *w, int64_t row_bytes, int64_t rows, const acts_t *x, int64_t t0, int nt,
                        float *y, int64_t ldy);

/* The 6-bit scale and min of sub-block j of a Q4_K / Q5_K superblock (12 packed bytes). */
static inline void scale_min_k4(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* The 16 6-bit scales of a Q3_K superblock (12 packed bytes) plus 32, 0..63, 8 a uint64 (byte j % 8 of
 * biased[j / 8]): scale j's low 4 bits are nibble j / 8 of byte j % 8, its top 2 bits bits 2 (j / 4) of byte
 * 8 + j % 4 (GGUF's fields are little-endian, as every kernel here reads them). */
static inline void q3_k_biased_scales(const uint8_t *packed, uint64_t biased[2]) {
    uint64_t low;
    uint32_t top;
    memcpy(&low, packed, 8), memcpy(&top, packed + 8, 4);
    const uint64_t nibbles = 0x0F0F0F0F0F0F0F0Full;
    const uint64_t top_a = (uint64_t)((top >> 2) & 0x03030303u) << 32 | (top & 0x03030303u);         /* 0-7 */
    const uint64_t top_b = (uint64_t)((top >> 6) & 0x03030303u) << 32 | ((top >> 4) & 0x03030303u);  /* 8-15 */
    biased[0] = (low & nibbles) | top_a << 4;
    biased[1] = ((low >> 4) & nibbles) | top_b << 4;
}

/* The 16 signed scales of a Q3_K superblock, -32..31 */
static inline void q3_k_scales(const uint8_t *packed, int8_t *scales) {
    uint64_t biased[2];
    q3_k_biased_scales(packed, biased);
    for (int j = 0; j < 16; j++) scales[j] = (int8_t)((int)((biased[j / 8] >> (8 * (j % 8))) & 0xFF) - 32);
}

/* Q5_0 / Q5_1: value i's 5-bit quant, 0..31 (qs nibbles as Q4_0's, bit 4 from qh) */
static inline int q5_value(const uint8_t *qh, const uint8_t *qs, int i) {
    const int nibble = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
    return nibble | ((qh[i / 8] >> (i % 8)) & 1) << 4;
}

/* The signed 6-bit scale of sub-block j of an IQ4_XS superblock, -32..31. */
static inline int iq4_xs_scale(const block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

static inline float fp16_to_f32(uint16_t h) {  /* portable: the scalar kernels and the driver */
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  /* subnormal: normalise */
        exp = 113;
        while (!(mant & 0x400)) {
            mant <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void strata_qmm_table_scalar(rows_fn table[NUM_TYPES]);
void strata_qmm_table_avx2(rows_fn table[NUM_TYPES]);
void strata_qmm_table_avx512(rows_fn table[NUM_TYPES]);
/* iquant_vbmi.c (x86, AVX-512 VBMI only): its code books from strata_iq (a bit a type it holds), and the
 * AVX-512 table with its kernels for those types */
int strata_iq_vbmi_prepare(void);
void strata_qmm_table_avx512vbmi(rows_fn table[NUM_TYPES], int ready);

/* ---- dequant_matmul.c: float32 activations times the weights dequantized exactly as gguf-py does ----
 * y[t * ldy + r] = sum_i x[t * k + i] * w_r[i] for r < rows, t < nt <= DQ_T: x is the tile's first row
 * of k floats, w_r row r (row_bytes from w) dequantized value by value with gguf's float32 operations
 * (dequant_scalar.c states them), summed in float32 in an order that depends on neither nt nor rows. */
enum { DQ_T = 8 };  /* rows of x a tile: each weight row is decoded once per tile */
typedef void (*dq_rows_fn)(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k, int nt,
                           float *y, int64_t ldy);

void strata_dqmm_table_scalar(dq_rows_fn table[NUM_TYPES]);
void strata_dqmm_table_avx2(dq_rows_fn table[NUM_TYPES]);

/* The same products for any number t of rows of x (a prompt chunk), with the bits of dq_rows_fn's: returns 0,
 * or 1 when its scratch could not be had (nothing written). From DQ_MANY_MIN rows of x, where the ISA has one;
 * AVX-512's 512-bit form from DQ_WIDE_MIN rows (below it the 256-bit form is as fast). */
enum { DQ_MANY_MIN = 16, DQ_WIDE_MIN = 64 };
typedef int (*dq_many_fn)(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k, int64_t t,
                          float *y, int64_t ldy);
void strata_dqmm_many_table_avx2(dq_many_fn table[NUM_TYPES]);
void strata_dqmm_many_table_avx512(dq_many_fn table[NUM_TYPES]);  /* dequant_avx512.c */
/* the many-rows function of the instruction set in use for t rows of x, or NULL */
dq_many_fn strata_dqmm_many(int qtype, int64_t t);
/* the dequantizing rows function of the instruction set in use (strata_qmm_supports(qtype) first) */
dq_rows_fn strata_dqmm_rows(int qtype);

/* ---- quant_matmul.c's parts that quant_moe.c uses ---------------------------------------------- */

enum { PARALLEL_QUANTIZE = 1 << 16 };  /* values to quantize from which the pool shares the work */

int strata_qmm_supports(int qtype);
/* values per weight block, bytes per block, values per activation scale */
void strata_qmm_type_sizes(int qtype, int64_t *block, int64_t *bytes, int64_t *act_block);
/* the rows function of the instruction set in use (strata_qmm_supports(qtype) first) */
rows_fn strata_qmm_rows(int qtype);
/* Scratch for the activations of t rows of k values, a scale every qb: acts_bytes(t, k, qb) bytes at
 * `scratch` (64-byte aligned), laid out by acts_at, which zeroes the scales (a tile's rows past the last
 * are read as 0 there, never their values). */
size_t strata_qmm_acts_bytes(int64_t t, int64_t k, int64_t qb);
acts_t strata_qmm_acts_at(void *scratch, int64_t t, int64_t k, int64_t qb);
/* row t of the activations = x [k] quantized */
void strata_qmm_quantize_row(const float *x, int64_t t, const acts_t *acts);

/* A phase: run_item(ctx, i) for every i < items, shared by up to `threads` threads (the caller included). */
typedef struct {
    void (*run_item)(const void *ctx, int64_t item);
    int64_t items;
    int threads;
} phase_t;

/* Run the phases in order on the pool (a phase starts once every item of the one before is done), one
 * call at a time. */
void strata_qmm_run_phases(const phase_t *phases, int count, const void *ctx);
/* Inside an item: wait until *counter >= value (acquire), spinning, then yielding. An item may wait only for
 * items claimed before it (a lower index of its phase): those are already running, so the wait ends. */
void strata_qmm_wait_until(const int64_t *counter, int64_t value);
int strata_qmm_set_spin_us(int us);

/* ---- quant_moe.c's entry, which offload_host_part.c calls (its contract there) ------------------ */
int strata_qmoe(const float *hidden, float *out, int64_t d, int64_t inter, int64_t pairs, const int64_t *rows,
                const int64_t *experts, const float *weights, int qtype13, const uint8_t *w13,
                int64_t w13_expert_stride, int64_t w13_row_stride, int qtype2, const uint8_t *w2,
                int64_t w2_expert_stride, int64_t w2_row_stride, int threads, int64_t num_rows, int64_t num_experts);

#endif
