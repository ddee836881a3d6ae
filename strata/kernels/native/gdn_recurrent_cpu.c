/* The gated delta rule of Gated DeltaNet layers on the CPU, token by token, for a step's windows (decode, 1 + k
 * verification, prompt chunks), reading and writing each sequence's state in place in the pool
 * (strata/kernels/cpu_gdn.py). The torch path gathered the states into a batch, masked the fresh ones, decayed,
 * took an outer product and scattered them back: ~9 passes over [Hv, Dk, Dv] float32 a sequence and a layer
 * (15.6-19.8 ms a layer for four sequences of Qwen3-Next's 32 x 128 x 128 on the 2-core VM). Here each state column
 * tile is read and written once a token while it sits in L1:
 *   S = S * decay;  pred = S^T k;  delta = (v - pred) * beta;  S = S + k delta^T;  out = S^T q
 * (q already scaled by Dk^-1/2, decay = exp(g), both by the caller). Column j's sums run over i = 0..Dk-1 in
 * order, one rounding an operation (built with -ffp-contract=off): a token's result depends on neither the
 * window it came in, nor the batch, nor the threads, nor the vector width of the build. One item of work is
 * (sequence, value head). Twice on x86, as paged_attention_cpu.c: portable and AVX2 (-DSTRATA_GDN_ENTRY). */
#include <stdint.h>
#include <string.h>

#include "quant_matmul.h"

typedef struct {
    const float *q, *k, *v, *decay, *beta;
    float *pool, *out, *all_states;
    const int64_t *slots, *begins, *ends, *has_initial;
    int64_t heads, dim_k, dim_v;
} gdn_t;

/* columns a tile: its Dk x COLUMNS floats (16 KB at Dk 128) stay in L1 across both passes */
enum { COLUMNS = 32 };

static inline void tile_token(float *state, int64_t dim_k, int64_t dim_v, int64_t c, int64_t n, const float *q,
                              const float *k, const float *v, float decay, float beta, float *out, float *kept) {
    float acc[COLUMNS] = {0.f}, delta[COLUMNS];
    for (int64_t i = 0; i < dim_k; i++) {  /* decay, then predicted = S^T k */
        float *row = state + i * dim_v + c;
        const float ki = k[i];
        for (int64_t j = 0; j < n; j++) {
            row[j] = row[j] * decay;
            acc[j] += row[j] * ki;
        }
    }
    for (int64_t j = 0; j < n; j++) {
        delta[j] = (v[c + j] - acc[j]) * beta;
        acc[j] = 0.f;
    }
    for (int64_t i = 0; i < dim_k; i++) {  /* the write k delta^T, then out = S^T q */
        float *row = state + i * dim_v + c;
        const float ki = k[i], qi = q[i];
        for (int64_t j = 0; j < n; j++) {
            row[j] = row[j] + ki * delta[j];
            acc[j] += row[j] * qi;
        }
        if (kept != NULL) memcpy(kept + i * dim_v + c, row, sizeof(float) * (size_t)n);
    }
    for (int64_t j = 0; j < n; j++) out[c + j] = acc[j];
}

static void run_head(const void *ctx, int64_t item) {
    const gdn_t *a = ctx;
    const int64_t seq = item / a->heads, h = item % a->heads, dk = a->dim_k, dv = a->dim_v;
    float *state = a->pool + (a->slots[seq] * a->heads + h) * dk * dv;
    if (!a->has_initial[seq]) memset(state, 0, sizeof(float) * (size_t)(dk * dv));
    for (int64_t t = a->begins[seq]; t < a->ends[seq]; t++) {
        const int64_t row = t * a->heads + h;
        float *kept = a->all_states != NULL ? a->all_states + row * dk * dv : NULL;
        for (int64_t c = 0; c < dv; c += COLUMNS) {
            const int64_t n = dv - c < COLUMNS ? dv - c : COLUMNS;
            tile_token(state, dk, dv, c, n, a->q + row * dk, a->k + row * dk, a->v + row * dv, a->decay[row],
                       a->beta[row], a->out + row * dv, kept);
        }
    }
}

#ifndef STRATA_GDN_ENTRY
#define STRATA_GDN_ENTRY strata_gdn_recurrent_f32
#endif

/* q, k [T, Hv, Dk], v [T, Hv, Dv], decay, beta [T, Hv] (float32, contiguous); pool [slots, Hv, Dk, Dv]; for each of
 * num_seqs sequences its pool row slots[s], its tokens begins[s] <= t < ends[s] and has_initial[s] (0: start from
 * zeros) -> out [T, Hv, Dv] at those tokens, all_states [T, Hv, Dk, Dv] (NULL: none) the state after each of them,
 * each state after its last token in the pool. Returns 0, or -1 (nothing done) for a slot outside the pool or
 * tokens outside [0, T). */
int STRATA_GDN_ENTRY(const float *q, const float *k, const float *v, const float *decay, const float *beta,
                     int64_t tokens, int64_t heads, int64_t dim_k, int64_t dim_v, float *pool, int64_t num_slots,
                     const int64_t *slots, const int64_t *begins, const int64_t *ends, const int64_t *has_initial,
                     int64_t num_seqs, float *out, float *all_states, int threads) {
    for (int64_t s = 0; s < num_seqs; s++)
        if (slots[s] < 0 || slots[s] >= num_slots || begins[s] < 0 || ends[s] > tokens || begins[s] > ends[s])
            return -1;
    const gdn_t ctx = {q, k, v, decay, beta, pool, out, all_states, slots, begins, ends, has_initial,
                       heads, dim_k, dim_v};
    const phase_t phase = {run_head, num_seqs * heads, threads};
    strata_qmm_run_phases(&phase, 1, &ctx);
    return 0;
}
