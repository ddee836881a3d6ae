/* y [T, N] = x [T, K] @ W.T (+ bias) for a float32 W [N, K] on the CPU, each output's sum in an order fixed by K
 * alone (`dots`; strata/kernels/cpu_linear.py).
 * torch's GEMM blocks its sums by the row count, so a row's result there depends on the rows beside it (a router's
 * logits moved ~1e-4 between 1 and 12 rows on the development VM); here it depends on neither the rows, nor the
 * threads, nor the build. Items are chunks of W's rows; each W row is read once a call and dotted with ROWS rows of
 * x at a time while it sits in L1. Built with -ffp-contract=off, twice on x86 (portable, AVX2: the same bits), as
 * paged_attention_cpu.c. */
#include <stdint.h>

#include "quant_matmul.h"

typedef struct {
    const float *x, *w, *bias;
    float *y;
    int64_t t, n, k, chunk;
} row_linear_t;

/* Each row's sum: SPAN = 4 x 8 lanes (k mod 32, four independent chains of adds: one chain waits ~3 cycles an add),
 * folded by a fixed tree, then the tail past the last whole span, then the bias. ROWS rows of x a pass over W's row. */
enum { LANES = 8, CHAINS = 4, SPAN = LANES * CHAINS, ROWS = 2 };

/* 8 floats as one value (GCC's vector extension: one ymm register in the AVX2 build, two xmm in the portable one);
 * its lanes are added and multiplied independently, so the width of the build never changes a sum */
typedef float lanes_t __attribute__((vector_size(LANES * sizeof(float))));

static inline lanes_t load(const float *p) {
    lanes_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

static inline float fold(const lanes_t chain[CHAINS], float tail) {
    const lanes_t v = (chain[0] + chain[2]) + (chain[1] + chain[3]);
    return (((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))) + tail;
}

/* out[r * ldy] = w . x[r] (+ bias) for the first `rows` (<= ROWS) rows of x, each in the one fixed order */
static inline void dots(const float *w, const float *x, int64_t k, int rows, float bias, int has_bias, float *out,
                        int64_t ldy) {
    lanes_t chain[ROWS][CHAINS];
    float tail[ROWS];
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < CHAINS; c++) chain[r][c] = (lanes_t){0.f};
        tail[r] = 0.f;
    }
    int64_t i = 0;
    for (; i + SPAN <= k; i += SPAN)
        for (int c = 0; c < CHAINS; c++) {
            const lanes_t wv = load(w + i + c * LANES);
            for (int r = 0; r < rows; r++) chain[r][c] += load(x + r * k + i + c * LANES) * wv;
        }
    for (; i < k; i++)
        for (int r = 0; r < rows; r++) tail[r] += x[r * k + i] * w[i];
    for (int r = 0; r < rows; r++) {
        const float sum = fold(chain[r], tail[r]);
        out[r * ldy] = has_bias ? sum + bias : sum;
    }
}

static void run_chunk(const void *ctx, int64_t item) {
    const row_linear_t *m = ctx;
    const int64_t first = item * m->chunk, last = first + m->chunk < m->n ? first + m->chunk : m->n;
    for (int64_t j = first; j < last; j++) {
        const float *w = m->w + j * m->k, bias = m->bias != NULL ? m->bias[j] : 0.f;
        for (int64_t r = 0; r < m->t; r += ROWS) {
            if (m->t - r >= ROWS)  /* a constant count: the compiler keeps the sums in registers */
                dots(w, m->x + r * m->k, m->k, ROWS, bias, m->bias != NULL, m->y + r * m->n + j, m->n);
            else
                dots(w, m->x + r * m->k, m->k, 1, bias, m->bias != NULL, m->y + r * m->n + j, m->n);
        }
    }
}

#ifndef STRATA_ROW_LINEAR_ENTRY
#define STRATA_ROW_LINEAR_ENTRY strata_row_linear_f32
#endif

/* x [T, K], w [N, K], bias [N] or NULL, y [T, N]: float32, contiguous. `chunk`: W rows an item. Returns 0. */
int STRATA_ROW_LINEAR_ENTRY(const float *x, int64_t t, const float *w, int64_t n, int64_t k, const float *bias,
                            float *y, int64_t chunk, int threads) {
    const row_linear_t ctx = {x, w, bias, y, t, n, k, chunk};
    const phase_t phase = {run_chunk, (n + chunk - 1) / chunk, threads};
    strata_qmm_run_phases(&phase, 1, &ctx);
    return 0;
}
