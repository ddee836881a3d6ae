/* Paged attention on the CPU for a float32 KV pool: the decode and short-window steps of the CPU path.
 *
 * out [T, H, D] = softmax(q K^T * scale, causal) V for each sequence's window of queries, K/V read in place
 * from the pool [N_blocks, B, Hkv, D] through the sequence's block table (no gather into a padded batch, no
 * mask). Query j of a window of n at the end of a context of L tokens sits at position L - n + j and sees
 * keys 0..L - n + j. One item of work is (sequence, KV head): its query heads share each K and V row read.
 * Each query row's sums run in an order fixed by its own context length, so the result depends on neither
 * the batch nor the thread count. Built with -ffast-math (so the compiler vectorises the reductions and expf)
 * into quant_matmul's library (strata/kernels/cpu_quant.py) and run on its pool, twice on x86: portable
 * (strata_paged_attention_f32) and with AVX2 + FMA (strata_paged_attention_f32_avx2, the name given by
 * -DSTRATA_ATTENTION_ENTRY), which the caller takes where the CPU has them. (One build with the kernel alone
 * cloned or compiled for AVX2 and a portable entry point ran 2-3x slower on a Zen 4.) It keeps clear of
 * infinities (-ffast-math assumes none). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "quant_matmul.h"

typedef struct {
    const float *q, *k, *v;
    float *out;
    const int64_t *tables, *seq_lens, *starts;
    int64_t heads, kv_heads, dim, block, width;
    float scale;
} attention_t;

static inline float dot(const float *a, const float *b, int64_t n) {
    float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += a[i + l] * b[i + l];
    float tail = 0.f;
    for (; i < n; i++) tail += a[i] * b[i];
    return (((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]))) + tail;
}

/* Each loop reads rows in position order, but they sit wherever the block table put them, which the hardware
 * prefetchers cannot follow, and a decode step reads them cold (the layer's matmuls went through the caches
 * since): the row AHEAD positions on is asked for ahead. 8 streams of SmolLM2 at ~900 tokens of context:
 * 76.4 against 112.4 ms a step (bench/results/2026-12-02-cpu-session21, attn_libs.py). */
enum { AHEAD = 8 };

/* where KV head g's row of the token at `pos` starts in a cache, through the sequence's block table */
static inline int64_t row_at(const attention_t *a, const int64_t *table, int64_t pos, int64_t g) {
    return ((table[pos / a->block] * a->block + pos % a->block) * a->kv_heads + g) * a->dim;
}

static inline void prefetch_row(const float *row, int64_t dim) {
    for (int64_t at = 0; at < dim * (int64_t)sizeof(float); at += 64) __builtin_prefetch((const char *)row + at);
}

#ifndef STRATA_ATTENTION_ENTRY
#define STRATA_ATTENTION_ENTRY strata_paged_attention_f32
#endif

static void attend(const void *ctx, int64_t item) {
    const attention_t *a = ctx;
    const int64_t seq = item / a->kv_heads, g = item % a->kv_heads, group = a->heads / a->kv_heads;
    const int64_t first = a->starts[seq], nq = a->starts[seq + 1] - first, len = a->seq_lens[seq], d = a->dim;
    if (nq <= 0 || len <= 0) return;
    const int64_t rows = nq * group, *table = a->tables + seq * a->width;
    float *scores = malloc(sizeof(float) * (size_t)(rows * len + rows));  /* [rows][len], then 1 / sums */
    if (scores == NULL) abort();
    float *inverse = scores + rows * len;
    /* scores: row r = (query j, head g * group + hh) */
    for (int64_t pos = 0; pos < len; pos++) {
        const float *k = a->k + row_at(a, table, pos, g);
        if (pos + AHEAD < len) prefetch_row(a->k + row_at(a, table, pos + AHEAD, g), d);
        for (int64_t j = pos < len - nq ? 0 : pos - (len - nq); j < nq; j++)
            for (int64_t hh = 0; hh < group; hh++) {
                const float *q = a->q + ((first + j) * a->heads + g * group + hh) * d;
                scores[(j * group + hh) * len + pos] = dot(q, k, d) * a->scale;
            }
    }
    for (int64_t r = 0; r < rows; r++) {  /* softmax over the keys row r sees: exp(s - max) / sum */
        const int64_t seen = len - nq + r / group + 1;
        float *s = scores + r * len, top = s[0], sum = 0.f;
        for (int64_t p = 1; p < seen; p++) top = s[p] > top ? s[p] : top;
        for (int64_t p = 0; p < seen; p++) sum += (s[p] = expf(s[p] - top));
        inverse[r] = 1.f / sum;
        float *o = a->out + ((first + r / group) * a->heads + g * group + r % group) * d;
        for (int64_t i = 0; i < d; i++) o[i] = 0.f;
    }
    for (int64_t pos = 0; pos < len; pos++) {
        const float *v = a->v + row_at(a, table, pos, g);
        if (pos + AHEAD < len) prefetch_row(a->v + row_at(a, table, pos + AHEAD, g), d);
        for (int64_t j = pos < len - nq ? 0 : pos - (len - nq); j < nq; j++)
            for (int64_t hh = 0; hh < group; hh++) {
                const float w = scores[(j * group + hh) * len + pos];
                float *o = a->out + ((first + j) * a->heads + g * group + hh) * d;
                for (int64_t i = 0; i < d; i++) o[i] += w * v[i];
            }
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = a->out + ((first + r / group) * a->heads + g * group + r % group) * d;
        for (int64_t i = 0; i < d; i++) o[i] *= inverse[r];
    }
    free(scores);
}

/* q [T, H, D], k/v caches [N_blocks, block, Hkv, D] (float32, contiguous), tables [S, width], seq_lens [S],
 * starts [S + 1] (int64) -> out [T, H, D]. Returns 0, or -1 when H is not a multiple of Hkv. */
int STRATA_ATTENTION_ENTRY(const float *q, int64_t heads, int64_t dim, const float *k, const float *v,
                           int64_t block, int64_t kv_heads, const int64_t *tables, int64_t width,
                           const int64_t *seq_lens, const int64_t *starts, int64_t num_seqs, float scale,
                           float *out, int threads) {
    if (kv_heads <= 0 || heads % kv_heads != 0) return -1;
    const attention_t ctx = {q, k, v, out, tables, seq_lens, starts, heads, kv_heads, dim, block, width, scale};
    const phase_t phase = {attend, num_seqs * kv_heads, threads};
    strata_qmm_run_phases(&phase, 1, &ctx);
    return 0;
}
