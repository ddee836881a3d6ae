/* The portable kernels: plain C, any CPU. They state the semantics the SIMD kernels (quant_simd.c) must
 * match: each weight block is decoded to small integers and per-sub-block integer scales, its integer
 * dot product with the int8 activations is exact, and the block's float scales are applied once:
 *   y += d_w * d_x * sum_j(scale_j * sum_i w_i q_i)  [+ min terms: min_j * bsum_j]. */
#include "iquant.h"

static int32_t dot_i8(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* the 32 nibbles of a 16-byte run: low nibbles first, then high (GGUF's order), minus `offset` */
static void nibbles(const uint8_t *qs, int offset, int8_t *v) {
    for (int i = 0; i < 16; i++) {
        v[i] = (int8_t)((qs[i] & 0xF) - offset);
        v[i + 16] = (int8_t)((qs[i] >> 4) - offset);
    }
}

static void row_q8_0(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; b++) {
        const block_q8_0 *blk = (const block_q8_0 *)w + b;
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)dot_i8(blk->qs, xq + b * QK, QK);
    }
    *y = acc;
}

static void row_q4_0(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    int8_t v[QK];
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_0 *blk = (const block_q4_0 *)w + b;
        nibbles(blk->qs, 8, v);
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)dot_i8(v, xq + b * QK, QK);
    }
    *y = acc;
}

static void row_q4_1(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f, acc_min = 0.f;
    int8_t v[QK];
    for (int64_t b = 0; b < nb; b++) {
        const block_q4_1 *blk = (const block_q4_1 *)w + b;
        nibbles(blk->qs, 0, v);
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)dot_i8(v, xq + b * QK, QK);
        acc_min += fp16_to_f32(blk->m) * *bsum_at(x, t, b);
    }
    *y = acc + acc_min;
}

/* IQ4_NL and MXFP4: Q4_0's nibbles as codes of a 16-entry table, times the block's scale */
static int32_t table_dot(const uint8_t *qs, const int8_t *table, const int8_t *xq) {
    int8_t v[QK];
    for (int i = 0; i < 16; i++) v[i] = table[qs[i] & 0xF], v[i + 16] = table[qs[i] >> 4];
    return dot_i8(v, xq, QK);
}

static void row_iq4_nl(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    for (int64_t b = 0; b < x->k / QK; b++) {
        const block_iq4_nl *blk = (const block_iq4_nl *)w + b;
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)table_dot(blk->qs, IQ4_VALUES, xq + b * QK);
    }
    *y = acc;
}

static void row_mxfp4(const uint8_t *w, const acts_t *x, int64_t t, float *y) {  /* the scale: a power of two */
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    for (int64_t b = 0; b < x->k / QK; b++) {
        const block_mxfp4 *blk = (const block_mxfp4 *)w + b;
        acc += mxfp4_scale(blk->e) * *d_at(x, t, b) * (float)table_dot(blk->qs, MXFP4_VALUES, xq + b * QK);
    }
    *y = acc;
}

/* Q5_0: 5-bit values minus 16, times d */
static void row_q5_0(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    int8_t v[QK];
    for (int64_t b = 0; b < nb; b++) {
        const block_q5_0 *blk = (const block_q5_0 *)w + b;
        for (int i = 0; i < QK; i++) v[i] = (int8_t)(q5_value(blk->qh, blk->qs, i) - 16);
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)dot_i8(v, xq + b * QK, QK);
    }
    *y = acc;
}

/* Q5_1: 5-bit values times d, plus the minimum m */
static void row_q5_1(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f, acc_min = 0.f;
    int8_t v[QK];
    for (int64_t b = 0; b < nb; b++) {
        const block_q5_1 *blk = (const block_q5_1 *)w + b;
        for (int i = 0; i < QK; i++) v[i] = (int8_t)q5_value(blk->qh, blk->qs, i);
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)dot_i8(v, xq + b * QK, QK);
        acc_min += fp16_to_f32(blk->m) * *bsum_at(x, t, b);
    }
    *y = acc + acc_min;
}

/* Q2_K / Q3_K: the 2 low bits of value e (see quant_matmul.h) */
static int low2(const uint8_t *qs, int e) { return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3; }

/* Q2_K: 16 sub-blocks of 16, w = d * sc_j * q - dmin * m_j, q 0..3: the minimum meets the sums of 16 (bsum16) */
static void row_q2_k(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK_K;
    const int8_t *xq = x->q + t * x->k;
    const float *bsum16 = x->bsum16_rows + t * (x->k / 16);
    float acc = 0.f;
    int8_t v[QK_K];
    for (int64_t b = 0; b < nb; b++) {
        const block_q2_k *blk = (const block_q2_k *)w + b;
        for (int e = 0; e < QK_K; e++) v[e] = (int8_t)low2(blk->qs, e);
        int32_t isum = 0;
        float min_sum = 0.f;
        for (int j = 0; j < QK_K / 16; j++) {
            isum += (blk->scales[j] & 0xF) * dot_i8(v + 16 * j, xq + b * QK_K + 16 * j, 16);
            min_sum += (float)(blk->scales[j] >> 4) * bsum16[b * 16 + j];
        }
        acc += fp16_to_f32(blk->d) * *d_at(x, t, b) * (float)isum - fp16_to_f32(blk->dmin) * min_sum;
    }
    *y = acc;
}

/* Q3_K: 16 sub-blocks of 16, w = d * sc_j * q, sc_j -32..31, q = low 2 bits - 4 where hmask's bit is clear */
static void row_q3_k(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK_K;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    int8_t v[QK_K], scales[16];
    for (int64_t b = 0; b < nb; b++) {
        const block_q3_k *blk = (const block_q3_k *)w + b;
        for (int e = 0; e < QK_K; e++)
            v[e] = (int8_t)(low2(blk->qs, e) - ((blk->hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
        q3_k_scales(blk->scales, scales);
        int32_t isum = 0;
        for (int j = 0; j < QK_K / 16; j++) isum += scales[j] * dot_i8(v + 16 * j, xq + b * QK_K + 16 * j, 16);
        acc += *d_at(x, t, b) * fp16_to_f32(blk->d) * (float)isum;
    }
    *y = acc;
}

/* Q4_K and Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and min (qh is NULL for Q4_K) */
static float superblock_k(const uint8_t *scales, uint16_t d, uint16_t dmin, const uint8_t *qs, const uint8_t *qh,
                          const acts_t *x, int64_t t, int64_t b) {
    const int8_t *xq = x->q + t * x->k + b * QK_K;
    int32_t isum = 0;
    float min_sum = 0.f;
    int8_t v[QK];
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(scales, j, &sc, &m);
        const uint8_t *q = qs + (j / 2) * 32;
        for (int i = 0; i < QK; i++) {
            int hi = qh != NULL ? ((qh[i] >> j) & 1) << 4 : 0;
            v[i] = (int8_t)(((j % 2 ? q[i] >> 4 : q[i]) & 0xF) | hi);
        }
        isum += sc * dot_i8(v, xq + j * QK, QK);
        min_sum += (float)m * *bsum_at(x, t, b * 8 + j);
    }
    return fp16_to_f32(d) * *d_at(x, t, b) * (float)isum - fp16_to_f32(dmin) * min_sum;
}

static void row_q4_k(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    float acc = 0.f;
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q4_k *blk = (const block_q4_k *)w + b;
        acc += superblock_k(blk->scales, blk->d, blk->dmin, blk->qs, NULL, x, t, b);
    }
    *y = acc;
}

static void row_q5_k(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    float acc = 0.f;
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        const block_q5_k *blk = (const block_q5_k *)w + b;
        acc += superblock_k(blk->scales, blk->d, blk->dmin, blk->qs, blk->qh, x, t, b);
    }
    *y = acc;
}

/* Q6_K: value h*128 + s*32 + l (half h, quarter s) takes its low 4 bits from ql[h*64 + (s%2)*32 + l]
 * (low nibble for s < 2, high for s >= 2) and its high 2 bits from qh[h*32 + l] >> 2s; minus 32; one
 * int8 scale per 16 values */
static void row_q6_k(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK_K;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    int8_t v[QK_K];
    for (int64_t b = 0; b < nb; b++) {
        const block_q6_k *blk = (const block_q6_k *)w + b;
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = (e / 32) % 4, l = e % 32;
            int lo = blk->ql[h * 64 + (s % 2) * 32 + l] >> (4 * (s / 2)) & 0xF;
            int hi = (blk->qh[h * 32 + l] >> (2 * s)) & 3;
            v[e] = (int8_t)((lo | (hi << 4)) - 32);
        }
        int32_t isum = 0;
        for (int j = 0; j < QK_K / 16; j++) isum += blk->scales[j] * dot_i8(v + 16 * j, xq + b * QK_K + 16 * j, 16);
        acc += *d_at(x, t, b) * fp16_to_f32(blk->d) * (float)isum;
    }
    *y = acc;
}

static void row_iq4_xs(const uint8_t *w, const acts_t *x, int64_t t, float *y) {
    const int64_t nb = x->k / QK_K;
    const int8_t *xq = x->q + t * x->k;
    float acc = 0.f;
    int8_t v[QK];
    for (int64_t b = 0; b < nb; b++) {
        const block_iq4_xs *blk = (const block_iq4_xs *)w + b;
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            for (int i = 0; i < 16; i++) {
                v[i] = IQ4_VALUES[blk->qs[16 * j + i] & 0xF];
                v[i + 16] = IQ4_VALUES[blk->qs[16 * j + i] >> 4];
            }
            isum += iq4_xs_scale(blk, j) * dot_i8(v, xq + b * QK_K + j * QK, QK);
        }
        acc += *d_at(x, t, b) * fp16_to_f32(blk->d) * (float)isum;
    }
    *y = acc;
}

/* The i-quants (iquant.h): w = d * unit * k_m * n over sub-blocks m of 16, k_m = 2 s_m + 1, n = sign * g
 * (IQ1_*: 8 g +- 1, the delta +-1/8 times 8). Inlined into each type's row (qtype a constant there). */
static inline __attribute__((always_inline)) void row_iq(int qtype, int64_t block_bytes, const uint8_t *w,
                                                         const acts_t *x, int64_t t, float *y) {
    const int8_t *xq = x->q + t * x->k;
    const int width = iq_row_width(qtype);
    float acc = 0.f;
    iq_fields_t f;
    int8_t v[QK_K];
    for (int64_t b = 0; b < x->k / QK_K; b++) {
        iq_fields(qtype, w + b * block_bytes, &f);
        for (int r = 0; r < QK_K / width; r++) {
            const int8_t *g = iq_grid_row(qtype, f.index[r]);
            for (int i = 0; i < width; i++) {
                const int e = r * width + i, negative = iq_negative(&f, e);
                v[e] = (int8_t)(is_iq1(qtype) ? 8 * g[i] + (negative ? -1 : 1) : negative ? -g[i] : g[i]);
            }
        }
        int32_t isum = 0;
        for (int m = 0; m < QK_K / 16; m++)
            isum += (2 * f.scales[m] + 1) * dot_i8(v + 16 * m, xq + b * QK_K + 16 * m, 16);
        acc += f.d * iq_unit(qtype) * *d_at(x, t, b) * (float)isum;
    }
    *y = acc;
}

#define IQ_ROW(name, id)                                                                                      \
    static void row_##name(const uint8_t *w, const acts_t *x, int64_t t, float *y) {                          \
        row_iq(id, sizeof(block_##name), w, x, t, y);                                                         \
    }
IQ_TYPES(IQ_ROW)

#define ROWS(name)                                                                                            \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const acts_t *x, int64_t t0,   \
                            int nt, float *y, int64_t ldy) {                                                  \
        for (int64_t r = 0; r < rows; r++)                                                                    \
            for (int t = 0; t < nt; t++) row_##name(w + r * row_bytes, x, t0 + t, y + t * ldy + r);           \
    }
QMM_TYPES(QMM_ROWS)

void strata_qmm_table_scalar(rows_fn table[NUM_TYPES]) {
    QMM_TYPES(QMM_TABLE_ENTRY)
}
