/* The portable dequantizing kernels, and the statement of what every dequant_matmul kernel computes: each
 * weight is gguf-py's float32 dequantization of its block, operation by operation (a multiply and an add
 * stay two roundings: this file is compiled with -ffp-contract=off, like dequant_simd.c), e.g. Q4_K's
 *   w = (q * (d * sc)) - (dmin * m),
 * and y = sum x * w in float32. A tile of rows decodes CHUNK values of a weight row once into floats and
 * runs every row of x over them; each row's sum takes the same order whatever the tile. */
#include "iquant.h"

enum { CHUNK = 512 };  /* weight values decoded at a time: a multiple of every block */

/* the 32 nibbles of a 16-byte run: low nibbles first, then high (GGUF's order) */
static void nibbles(const uint8_t *qs, int *v) {
    for (int i = 0; i < 16; i++) v[i] = qs[i] & 0xF, v[i + 16] = qs[i] >> 4;
}

/* Each decode_<type>(w, v0, len, out): values v0 .. v0 + len of the row at w (whole blocks) -> out [len] */

static void decode_q8_0(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q8_0 *blk = (const block_q8_0 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d);
        for (int i = 0; i < QK; i++) out[i] = (float)blk->qs[i] * d;
    }
}

static void decode_q4_0(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int v[QK];
    for (const block_q4_0 *blk = (const block_q4_0 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d);
        nibbles(blk->qs, v);
        for (int i = 0; i < QK; i++) out[i] = (float)(v[i] - 8) * d;
    }
}

static void decode_iq4_nl(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int v[QK];
    for (const block_iq4_nl *blk = (const block_iq4_nl *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d);
        nibbles(blk->qs, v);
        for (int i = 0; i < QK; i++) out[i] = (float)IQ4_VALUES[v[i]] * d;
    }
}

static void decode_mxfp4(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int v[QK];
    for (const block_mxfp4 *blk = (const block_mxfp4 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = mxfp4_scale(blk->e);
        nibbles(blk->qs, v);
        for (int i = 0; i < QK; i++) out[i] = d * (float)MXFP4_VALUES[v[i]];
    }
}

static void decode_q4_1(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int v[QK];
    for (const block_q4_1 *blk = (const block_q4_1 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d), m = fp16_to_f32(blk->m);
        nibbles(blk->qs, v);
        for (int i = 0; i < QK; i++) out[i] = (float)v[i] * d + m;
    }
}

static void decode_q5_0(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q5_0 *blk = (const block_q5_0 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d);
        for (int i = 0; i < QK; i++) out[i] = (float)(q5_value(blk->qh, blk->qs, i) - 16) * d;
    }
}

static void decode_q5_1(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q5_1 *blk = (const block_q5_1 *)w + v0 / QK; len > 0; blk++, len -= QK, out += QK) {
        const float d = fp16_to_f32(blk->d), m = fp16_to_f32(blk->m);
        for (int i = 0; i < QK; i++) out[i] = (float)q5_value(blk->qh, blk->qs, i) * d + m;
    }
}

/* Q2_K / Q3_K: the 2 low bits of value e (quant_matmul.h) */
static int low2(const uint8_t *qs, int e) { return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3; }

/* w = (q * (d * sc)) - (dmin * m) over sub-blocks of 16 */
static void decode_q2_k(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q2_k *blk = (const block_q2_k *)w + v0 / QK_K; len > 0; blk++, len -= QK_K, out += QK_K) {
        const float d = fp16_to_f32(blk->d), dmin = fp16_to_f32(blk->dmin);
        for (int e = 0; e < QK_K; e++) {
            const uint8_t sc_m = blk->scales[e / 16];
            const float scale = d * (float)(sc_m & 0xF), minimum = dmin * (float)(sc_m >> 4);
            out[e] = (float)low2(blk->qs, e) * scale - minimum;
        }
    }
}

/* w = (d * sc) * q, sc -32..31, q the low 2 bits minus 4 where hmask's bit is clear */
static void decode_q3_k(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int8_t scales[16];
    for (const block_q3_k *blk = (const block_q3_k *)w + v0 / QK_K; len > 0; blk++, len -= QK_K, out += QK_K) {
        const float d = fp16_to_f32(blk->d);
        q3_k_scales(blk->scales, scales);
        for (int e = 0; e < QK_K; e++) {
            const int q = low2(blk->qs, e) - ((blk->hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
            out[e] = (d * (float)scales[e / 16]) * (float)q;
        }
    }
}

/* Q4_K and Q5_K (qh NULL for Q4_K): sub-block j of 32 takes nibbles of qs[(j / 2) * 32 ..], low for even j,
 * and bit j of qh[i] as bit 4 */
static void decode_k(const uint8_t *scales, uint16_t d16, uint16_t dmin16, const uint8_t *qs, const uint8_t *qh,
                     float *out) {
    const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(scales, j, &sc, &m);
        const float scale = d * (float)sc, minimum = dmin * (float)m;
        const uint8_t *q = qs + (j / 2) * 32;
        for (int i = 0; i < QK; i++) {
            const int hi = qh != NULL ? ((qh[i] >> j) & 1) << 4 : 0;
            out[j * QK + i] = (float)(((j % 2 ? q[i] >> 4 : q[i]) & 0xF) | hi) * scale - minimum;
        }
    }
}

static void decode_q4_k(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q4_k *blk = (const block_q4_k *)w + v0 / QK_K; len > 0; blk++, len -= QK_K, out += QK_K)
        decode_k(blk->scales, blk->d, blk->dmin, blk->qs, NULL, out);
}

static void decode_q5_k(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q5_k *blk = (const block_q5_k *)w + v0 / QK_K; len > 0; blk++, len -= QK_K, out += QK_K)
        decode_k(blk->scales, blk->d, blk->dmin, blk->qs, blk->qh, out);
}

/* value h*128 + s*32 + l: low 4 bits from ql[h*64 + (s%2)*32 + l] (high nibble for s >= 2), high 2 bits
 * from qh[h*32 + l] >> 2s; minus 32; times d * the int8 scale of its 16 values */
static void decode_q6_k(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    for (const block_q6_k *blk = (const block_q6_k *)w + v0 / QK_K; len > 0; blk++, len -= QK_K, out += QK_K) {
        const float d = fp16_to_f32(blk->d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            const int lo = blk->ql[h * 64 + (s % 2) * 32 + l] >> (4 * (s / 2)) & 0xF;
            const int hi = (blk->qh[h * 32 + l] >> (2 * s)) & 3;
            out[e] = (float)((lo | (hi << 4)) - 32) * (d * (float)blk->scales[e / 16]);
        }
    }
}

static void decode_iq4_xs(const uint8_t *w, int64_t v0, int64_t len, float *out) {
    int v[QK];
    for (const block_iq4_xs *blk = (const block_iq4_xs *)w + v0 / QK_K; len > 0; blk++, len -= QK_K) {
        const float d = fp16_to_f32(blk->d);
        for (int j = 0; j < 8; j++, out += QK) {
            const float scale = d * (float)iq4_xs_scale(blk, j);
            nibbles(blk->qs + 16 * j, v);
            for (int i = 0; i < QK; i++) out[i] = (float)IQ4_VALUES[v[i]] * scale;
        }
    }
}

/* The i-quants (iquant.h), gguf-py's operations: IQ2_*: ((d * (0.5 + s)) * 0.25) * g * sign; IQ3_XXS: the same
 * with 0.5 for 0.25; IQ3_S: (d * (1 + 2 s)) * g * sign; IQ1_*: (d * (2 s + 1)) * (g + delta), delta = +-1/8.
 * Inlined into each type's decode (qtype a constant there). */
static inline __attribute__((always_inline)) void decode_iq(int qtype, int64_t block_bytes, const uint8_t *w,
                                                            int64_t v0, int64_t len, float *out) {
    const int width = iq_row_width(qtype);
    iq_fields_t f;
    for (const uint8_t *blk = w + v0 / QK_K * block_bytes; len > 0; blk += block_bytes, len -= QK_K, out += QK_K) {
        iq_fields(qtype, blk, &f);
        for (int r = 0; r < QK_K / width; r++) {
            const int8_t *grid = iq_grid_row(qtype, f.index[r]);
            const int s = f.scales[r * width / 16];
            const float db = is_iq1(qtype) ? f.d * (float)(2 * s + 1)   /* gguf's db (IQ1: dl) */
                           : qtype == T_IQ3_S ? f.d * (float)(1 + 2 * s)
                           : f.d * (.5f + (float)s) * (qtype == T_IQ3_XXS ? .5f : .25f);
            for (int i = 0; i < width; i++) {
                const int e = r * width + i;
                const float sign = iq_negative(&f, e) ? -1.f : 1.f;
                out[e] = is_iq1(qtype) ? db * ((float)grid[i] + .125f * sign) : db * (float)grid[i] * sign;
            }
        }
    }
}

#define IQ_DECODE(name, id)                                                                                   \
    static void decode_##name(const uint8_t *w, int64_t v0, int64_t len, float *out) {                        \
        decode_iq(id, sizeof(block_##name), w, v0, len, out);                                                 \
    }
IQ_TYPES(IQ_DECODE)

/* acc[l] += x[i] * w[i] for i = l mod 8: eight sums, which the compiler may keep in one vector */
static void dot8(const float *x, const float *w, int64_t len, float *acc) {
    for (int64_t i = 0; i < len; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * w[i + l];
}

static float sum8(const float *acc) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#define ROWS(name)                                                                                            \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const float *x, int64_t k,      \
                            int nt, float *y, int64_t ldy) {                                                  \
        float wf[CHUNK];                                                                                      \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            float acc[DQ_T][8] = {{0.f}};                                                                     \
            for (int64_t c0 = 0; c0 < k; c0 += CHUNK) {                                                       \
                const int64_t len = k - c0 < CHUNK ? k - c0 : CHUNK;                                          \
                decode_##name(w + r * row_bytes, c0, len, wf);                                                \
                for (int t = 0; t < nt; t++) dot8(x + t * k + c0, wf, len, acc[t]);                           \
            }                                                                                                 \
            for (int t = 0; t < nt; t++) y[t * ldy + r] = sum8(acc[t]);                                       \
        }                                                                                                     \
    }
QMM_TYPES(QMM_ROWS)

void strata_dqmm_table_scalar(dq_rows_fn table[NUM_TYPES]) {
    QMM_TYPES(QMM_TABLE_ENTRY)
}
