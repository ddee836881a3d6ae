/* Paged attention on the CPU for a float32 KV pool: the decode and short-window steps of the CPU path.
 *
 * out [T, H, D] = softmax(q K^T * scale, causal) V for each sequence's window of queries, K/V read in place
 * from the pool [N_blocks, B, Hkv, D] through the sequence's block table (no gather into a padded batch, no
 * mask). Query j of a window of n at the end of a context of L tokens sits at position L - n + j and sees
 * keys 0..L - n + j. One item of work is (sequence, KV head): its query heads share each K and V row read.
 * Each query row's sums run in an order fixed by its own context length, so the result depends on neither
 * the batch, nor the thread count, nor the window it came in. The keys every query of a window sees are scored
 * KEYS at a time, and each row's weighted sum of V stays in registers across the positions: 8 streams of
 * SmolLM2 at 100 tokens of context, 102-131 -> 58 us a call on the idle 2-core Zen 2 VM (session 57). Built with
 * -ffast-math (so the compiler vectorises the reductions and expf) into quant_matmul's library
 * (strata/kernels/cpu_quant.py) and run on its pool, twice on x86: portable (strata_paged_attention_f32) and
 * with AVX2 + FMA (strata_paged_attention_f32_avx2, the name given by -DSTRATA_ATTENTION_ENTRY), which the
 * caller takes where the CPU has them. (One build with the kernel alone cloned or compiled for AVX2 and a
 * portable entry point ran 2-3x slower on a Zen 4.) It keeps clear of infinities (-ffast-math assumes none). */
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

static inline float lanes_sum(const float lane[8]) {
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static inline float dot(const float *a, const float *b, int64_t n) {
    float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += a[i + l] * b[i + l];
    float tail = 0.f;
    for (; i < n; i++) tail += a[i] * b[i];
    return lanes_sum(lane) + tail;
}

/* out[p] = dot(q, keys[p], n) * scale for KEYS keys at once: KEYS independent sums where one dot alone waits on
 * its own chain of adds. Each is written as dot's sum (8 lanes, i = lane mod 8, then lanes_sum) when n is a
 * multiple of 8, so that a position's score does not depend on whether it fell in a group: -ffast-math leaves
 * the order to the compiler, and tests/kernels/test_cpu_attention.py holds a window's rows (whose groups end
 * sooner) to a one-query step's bits. AVX2 builds only (KEYS 1: none). */
#ifdef __AVX2__
#include <immintrin.h>
enum { KEYS = 4 };
static inline void key_dots(const float *q, const float *const keys[KEYS], int64_t n, float scale, float *out) {
    if (n % 8) {
        for (int p = 0; p < KEYS; p++) out[p] = dot(q, keys[p], n) * scale;
        return;
    }
    __m256 acc[KEYS];
    for (int p = 0; p < KEYS; p++) acc[p] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 x = _mm256_loadu_ps(q + i);
        for (int p = 0; p < KEYS; p++) acc[p] = _mm256_fmadd_ps(x, _mm256_loadu_ps(keys[p] + i), acc[p]);
    }
    for (int p = 0; p < KEYS; p++) {
        float lane[8];
        _mm256_storeu_ps(lane, acc[p]);
        out[p] = lanes_sum(lane) * scale;
    }
}
#else
enum { KEYS = 1 };
static inline void key_dots(const float *q, const float *const keys[], int64_t n, float scale, float *out) {
    out[0] = dot(q, keys[0], n) * scale;
}
#endif

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

/* o[i] = inverse * sum over p < seen of w[p] * values[p][c + i], i < n, positions in order: at n == VALUES (a
 * constant trip count) the sums stay in registers across the positions, where adding into o in memory paid a
 * load and a store a vector a position. `prefetch`: ask for the rows ahead (the item's first row does). */
enum { VALUES = 64 };
static inline void weighted_rows(const float *w, const float *const *values, int64_t seen, int64_t c, int64_t n,
                                 int prefetch, float inverse, float *o) {
    float acc[VALUES] = {0.f};
    for (int64_t p = 0; p < seen; p++) {
        if (prefetch && p + AHEAD < seen) prefetch_row(values[p + AHEAD] + c, n);
        const float wp = w[p], *v = values[p] + c;
        for (int64_t i = 0; i < n; i++) acc[i] += wp * v[i];
    }
    for (int64_t i = 0; i < n; i++) o[i] = acc[i] * inverse;
}

#ifndef STRATA_ATTENTION_ENTRY
#define STRATA_ATTENTION_ENTRY strata_paged_attention_f32
#endif

/* where row r of an item's rows (query first + r / group, head g * group + r % group) starts in q and in out */
static inline int64_t row_offset(const attention_t *a, int64_t first, int64_t g, int64_t group, int64_t r) {
    return ((first + r / group) * a->heads + g * group + r % group) * a->dim;
}

static void attend(const void *ctx, int64_t item) {
    const attention_t *a = ctx;
    const int64_t seq = item / a->kv_heads, g = item % a->kv_heads, group = a->heads / a->kv_heads;
    const int64_t first = a->starts[seq], nq = a->starts[seq + 1] - first, len = a->seq_lens[seq], d = a->dim;
    if (nq <= 0 || len <= 0) return;
    const int64_t rows = nq * group, *table = a->tables + seq * a->width;
    /* [len] each position's V row, then [rows][len] scores, then [rows] 1 / sums */
    const float **values = malloc(sizeof(float *) * (size_t)len + sizeof(float) * (size_t)(rows * len + rows));
    if (values == NULL) abort();
    float *scores = (float *)(values + len), *inverse = scores + rows * len;
    /* scores: row r = (query j, head g * group + hh); the keys all rows see KEYS at a time where that build has it */
    int64_t pos = 0;
    for (const int64_t shared = len - nq + 1; KEYS > 1 && pos + KEYS <= shared; pos += KEYS) {
        const float *keys[KEYS];
        for (int p = 0; p < KEYS; p++) {
            keys[p] = a->k + row_at(a, table, pos + p, g);
            values[pos + p] = a->v + row_at(a, table, pos + p, g);
            if (pos + p + AHEAD < len) prefetch_row(a->k + row_at(a, table, pos + p + AHEAD, g), d);
        }
        for (int64_t r = 0; r < rows; r++)
            key_dots(a->q + row_offset(a, first, g, group, r), keys, d, a->scale, scores + r * len + pos);
    }
    for (; pos < len; pos++) {
        const float *k = a->k + row_at(a, table, pos, g);
        if (pos + AHEAD < len) prefetch_row(a->k + row_at(a, table, pos + AHEAD, g), d);
        for (int64_t j = pos < len - nq ? 0 : pos - (len - nq); j < nq; j++)
            for (int64_t hh = 0; hh < group; hh++) {
                const float *q = a->q + ((first + j) * a->heads + g * group + hh) * d;
                scores[(j * group + hh) * len + pos] = dot(q, k, d) * a->scale;
            }
        values[pos] = a->v + row_at(a, table, pos, g);
    }
    for (int64_t r = 0; r < rows; r++) {  /* softmax over the keys row r sees: exp(s - max) / sum */
        const int64_t seen = len - nq + r / group + 1;
        float *s = scores + r * len, top = s[0], sum = 0.f;
        for (int64_t p = 1; p < seen; p++) top = s[p] > top ? s[p] : top;
        for (int64_t p = 0; p < seen; p++) sum += (s[p] = expf(s[p] - top));
        inverse[r] = 1.f / sum;
    }
    for (int64_t r = 0; r < rows; r++) {  /* each row's weighted sum of V over what it sees, then / the sum */
        const int64_t seen = len - nq + r / group + 1;
        float *o = a->out + row_offset(a, first, g, group, r);
        for (int64_t c = 0; c < d; c += VALUES) {
            if (d - c >= VALUES)
                weighted_rows(scores + r * len, values, seen, c, VALUES, r == 0, inverse[r], o + c);
            else
                weighted_rows(scores + r * len, values, seen, c, d - c, r == 0, inverse[r], o + c);
        }
    }
    free(values);
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
