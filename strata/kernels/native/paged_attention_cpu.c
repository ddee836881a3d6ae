/* Paged attention on the CPU for a float32 KV pool: the decode and short-window steps of the CPU path.
 *
 * out [T, H, D] = softmax(q K^T * scale, causal) V for each sequence's window of queries, K/V read in place
 * from the pool [N_blocks, B, Hkv, D] through the sequence's block table (no gather into a padded batch, no
 * mask). Query j of a window of n at the end of a context of L tokens sits at position L - n + j and sees
 * keys 0..L - n + j. One item of work is (sequence, KV head, split of SPLIT positions): its query heads share
 * each K and V row read, and a query's heads weigh each V row together; a second phase merges each row's splits
 * (flash decoding), so one long sequence keeps every thread busy (one stream of SmolLM2 has 3 KV heads for 2
 * threads). Each query row's sums run in an order fixed by its own context length, so the result depends on
 * neither the batch, nor the thread count, nor the window it came in. The keys every query of a window sees are scored
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
    int64_t heads, kv_heads, dim, block, width, num_seqs;
    float scale;
    const int64_t *item_starts, *part_starts;  /* [S + 1] each: a sequence's first split item, first part row */
    float *parts;  /* per (sequence, split, query row, head): [D] weighted V, the split's max, its sum of exps */
} attention_t;

/* positions a split covers: a query's sums over them run in one order whatever else is in the call, so the
 * result depends on neither the batch, nor the threads, nor the window (splits let one long sequence use
 * every thread: one stream's KV heads alone are too few items) */
enum { SPLIT = 1024 };

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
 * since): the rows AHEAD positions on are asked for ahead. 8 streams of SmolLM2 at ~900 tokens of context:
 * 76.4 against 112.4 ms a step (bench/results/2026-12-02-cpu-session21, attn_libs.py). The scores' pass asks
 * for the K and the V rows into L2 (prefetcht1: a split's K and V fit there): one stream of SmolLM2 at 8,000
 * tokens, cold, two threads, 1,006 -> 656 us a layer against 8 rows into L1
 * (bench/results/2026-12-08-cpu-session76). */
enum { AHEAD = 32 };

/* where KV head g's row of the token at `pos` starts in a cache, through the sequence's block table */
static inline int64_t row_at(const attention_t *a, const int64_t *table, int64_t pos, int64_t g) {
    return ((table[pos / a->block] * a->block + pos % a->block) * a->kv_heads + g) * a->dim;
}

static inline void prefetch_row(const float *row, int64_t dim) {
    for (int64_t at = 0; at < dim * (int64_t)sizeof(float); at += 64)
        __builtin_prefetch((const char *)row + at, 0, 2);  /* prefetcht1: into L2 */
}

/* o_r[i] = inverse_r * sum over p < seen of w_r[p] * values[p][c + i], i < VALUES, for the NR rows of one query
 * (its heads of a KV head's group: they see the same keys): each position's VALUES floats of V (a cache line)
 * are loaded once and meet every row's weight, where a row at a time read all of V once a row (group 3: V read
 * 3x). Each row's sums run over p in order as before, so a row's bits do not depend on the rows beside it.
 * NR and the trip counts are constants at every call (weighted_rows below), so the NR x VALUES sums stay in
 * registers. `prefetch`: ask for the rows ahead into L1 (the query's first pass does), on top of the scores'
 * pass asking for them into L2: without it, 8,000 keys took 812-948 against 633 us a layer (session 76). */
enum { VALUES = 16, ROWS_AT_ONCE = 4 };
static inline void weighted_rows_nr(const int nr, const float *const *w, const float *const *values, int64_t seen,
                                    int64_t c, int prefetch, const float *inverse, float *const *o) {
    float acc[ROWS_AT_ONCE][VALUES] = {{0.f}};
    for (int64_t p = 0; p < seen; p++) {
        if (prefetch && p + AHEAD < seen) __builtin_prefetch((const char *)(values[p + AHEAD] + c));
        const float *v = values[p] + c;
        for (int r = 0; r < nr; r++) {
            const float wp = w[r][p];
            for (int i = 0; i < VALUES; i++) acc[r][i] += wp * v[i];
        }
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < VALUES; i++) o[r][c + i] = acc[r][i] * inverse[r];
}

/* the same for a tail of n < VALUES columns, one row at a time */
static inline void weighted_tail(const float *w, const float *const *values, int64_t seen, int64_t c, int64_t n,
                                 float inverse, float *o) {
    float acc[VALUES] = {0.f};
    for (int64_t p = 0; p < seen; p++) {
        const float wp = w[p], *v = values[p] + c;
        for (int64_t i = 0; i < n; i++) acc[i] += wp * v[i];
    }
    for (int64_t i = 0; i < n; i++) o[c + i] = acc[i] * inverse;
}

/* rows 0..nr - 1 of one query (w[r]: row r's weights, o[r]: its output row, inverse[r]: 1 / its sum) */
static void weighted_rows(int nr, const float *const *w, const float *const *values, int64_t seen, int64_t d,
                          const float *inverse, float *const *o) {
    for (int r0 = 0; r0 < nr; r0 += ROWS_AT_ONCE) {
        const int n = nr - r0 < ROWS_AT_ONCE ? nr - r0 : ROWS_AT_ONCE;
        int64_t c = 0;
        for (; c + VALUES <= d; c += VALUES) {
            const int prefetch = r0 == 0;
            switch (n) {  /* a constant row count in each body */
            case 1: weighted_rows_nr(1, w + r0, values, seen, c, prefetch, inverse + r0, o + r0); break;
            case 2: weighted_rows_nr(2, w + r0, values, seen, c, prefetch, inverse + r0, o + r0); break;
            case 3: weighted_rows_nr(3, w + r0, values, seen, c, prefetch, inverse + r0, o + r0); break;
            default: weighted_rows_nr(4, w + r0, values, seen, c, prefetch, inverse + r0, o + r0); break;
            }
        }
        for (int r = r0; c < d && r < r0 + n; r++) weighted_tail(w[r], values, seen, c, d - c, inverse[r], o[r]);
    }
}

#ifndef STRATA_ATTENTION_ENTRY
#define STRATA_ATTENTION_ENTRY strata_paged_attention_f32
#endif

/* where row r of an item's rows (query first + r / group, head g * group + r % group) starts in q and in out */
static inline int64_t row_offset(const attention_t *a, int64_t first, int64_t g, int64_t group, int64_t r) {
    return ((first + r / group) * a->heads + g * group + r % group) * a->dim;
}

/* where the part of (sequence seq, split s, query row t, head h) starts in a->parts: a sequence's parts are
 * [splits][its queries][heads] */
static inline int64_t part_at(const attention_t *a, int64_t seq, int64_t s, int64_t t, int64_t h) {
    const int64_t nq = a->starts[seq + 1] - a->starts[seq];
    return (a->part_starts[seq] + (s * nq + t - a->starts[seq]) * a->heads + h) * (a->dim + 2);
}

/* The part of (sequence, KV head g) over the positions of split `part` ([part * SPLIT, part * SPLIT + SPLIT)):
 * each of its rows' scores over the keys it sees there, their maximum and sum of exps, and its weighted sum of V
 * relative to that maximum, into the row's slot of a->parts (merge() adds the splits up). */
static void attend_split(const void *ctx, int64_t item) {
    const attention_t *a = ctx;
    int64_t seq = 0, high = a->num_seqs - 1;  /* the sequence whose items hold `item`: item_starts[seq] <= item */
    while (seq < high) {
        const int64_t mid = (seq + high + 1) / 2;
        if (a->item_starts[mid] <= item) seq = mid; else high = mid - 1;
    }
    const int64_t local = item - a->item_starts[seq], g = local % a->kv_heads, part = local / a->kv_heads;
    const int64_t group = a->heads / a->kv_heads, first = a->starts[seq], nq = a->starts[seq + 1] - first;
    const int64_t len = a->seq_lens[seq], d = a->dim, p0 = part * SPLIT, p1 = p0 + SPLIT < len ? p0 + SPLIT : len;
    const int64_t n = p1 - p0, rows = nq * group, *table = a->tables + seq * a->width;
    /* [n] each position's V row, [group] a query's weight rows and [group] its output rows, then [rows][n]
     * scores, then [rows] each row's factor on its sums (1 / its sum, or 1 into a part) */
    const float **values = malloc(sizeof(float *) * (size_t)(n + 2 * group) +
                                  sizeof(float) * (size_t)(rows * n + rows));
    if (values == NULL) abort();
    const float **w = values + n;
    float **o = (float **)(w + group);
    float *scores = (float *)(o + group), *factor = scores + rows * n;
    /* the keys all rows see (positions < shared), KEYS at a time where that build has it; then each row's own */
    const int64_t shared = len - nq + 1;
    int64_t pos = p0;
    for (; KEYS > 1 && pos + KEYS <= (shared < p1 ? shared : p1); pos += KEYS) {
        const float *keys[KEYS];
        for (int p = 0; p < KEYS; p++) {
            keys[p] = a->k + row_at(a, table, pos + p, g);
            values[pos + p - p0] = a->v + row_at(a, table, pos + p, g);
            if (pos + p + AHEAD < p1) {  /* its K row for the scores, its V row for the weighted sums after */
                prefetch_row(a->k + row_at(a, table, pos + p + AHEAD, g), d);
                prefetch_row(a->v + row_at(a, table, pos + p + AHEAD, g), d);
            }
        }
        for (int64_t r = 0; r < rows; r++)
            key_dots(a->q + row_offset(a, first, g, group, r), keys, d, a->scale, scores + r * n + pos - p0);
    }
    for (; pos < p1; pos++) {
        const float *k = a->k + row_at(a, table, pos, g);
        if (pos + AHEAD < p1) {
            prefetch_row(a->k + row_at(a, table, pos + AHEAD, g), d);
            prefetch_row(a->v + row_at(a, table, pos + AHEAD, g), d);
        }
        for (int64_t j = pos < len - nq ? 0 : pos - (len - nq); j < nq; j++)
            for (int64_t hh = 0; hh < group; hh++) {
                const float *q = a->q + ((first + j) * a->heads + g * group + hh) * d;
                scores[(j * group + hh) * n + pos - p0] = dot(q, k, d) * a->scale;
            }
        values[pos - p0] = a->v + row_at(a, table, pos, g);
    }
    for (int64_t j = 0; j < nq; j++) {  /* query j sees positions < len - nq + j + 1: seen of this split's n */
        const int64_t seen = len - nq + j + 1 - p0;
        if (seen <= 0) continue;  /* the split lies past this query (later splits: all of them) */
        for (int64_t hh = 0; hh < group; hh++) {  /* exp(s - max) in place, the max and the sum kept */
            const int64_t r = j * group + hh, m = seen < n ? seen : n;
            float *sc = scores + r * n, top = sc[0], sum = 0.f;
            for (int64_t p = 1; p < m; p++) top = sc[p] > top ? sc[p] : top;
            for (int64_t p = 0; p < m; p++) sum += (sc[p] = expf(sc[p] - top));
            w[hh] = sc;
            if (a->parts == NULL) {  /* every sequence in one split: the output row itself, / the sum */
                o[hh] = a->out + ((first + j) * a->heads + g * group + hh) * d, factor[r] = 1.f / sum;
            } else {  /* the split's part: its sums as they are, the max and the sum beside them */
                o[hh] = a->parts + part_at(a, seq, part, first + j, g * group + hh);
                o[hh][d] = top, o[hh][d + 1] = sum, factor[r] = 1.f;
            }
        }
        weighted_rows((int)group, w, values, seen < n ? seen : n, d, factor + j * group, o);
    }
    free(values);
}

/* Row (query t, head h) of sequence seq: its splits' parts (each [D] weighted V, max, sum) merged in split order:
 * out = sum_s e^(top_s - M) acc_s / sum_s e^(top_s - M) sum_s, M the largest top. One item per (seq, KV head). */
static void merge(const void *ctx, int64_t item) {
    const attention_t *a = ctx;
    const int64_t seq = item / a->kv_heads, g = item % a->kv_heads, group = a->heads / a->kv_heads, d = a->dim;
    const int64_t first = a->starts[seq], nq = a->starts[seq + 1] - first, len = a->seq_lens[seq];
    if (nq <= 0 || len <= 0) return;
    for (int64_t j = 0; j < nq; j++) {
        const int64_t splits = (len - nq + j + 1 + SPLIT - 1) / SPLIT;  /* the splits query j sees */
        for (int64_t hh = 0; hh < group; hh++) {
            const int64_t h = g * group + hh;
            float *out = a->out + ((first + j) * a->heads + h) * d;
            const float *part0 = a->parts + part_at(a, seq, 0, first + j, h);
            if (splits == 1) {  /* one split: its sums scaled by 1 / its sum */
                const float inverse = 1.f / part0[d + 1];
                for (int64_t i = 0; i < d; i++) out[i] = part0[i] * inverse;
                continue;
            }
            float top = part0[d];
            for (int64_t s = 1; s < splits; s++) {
                const float t = a->parts[part_at(a, seq, s, first + j, h) + d];
                top = t > top ? t : top;
            }
            float total = 0.f;
            for (int64_t i = 0; i < d; i++) out[i] = 0.f;
            for (int64_t s = 0; s < splits; s++) {
                const float *part = a->parts + part_at(a, seq, s, first + j, h), weight = expf(part[d] - top);
                total += weight * part[d + 1];
                for (int64_t i = 0; i < d; i++) out[i] += weight * part[i];
            }
            const float inverse = 1.f / total;
            for (int64_t i = 0; i < d; i++) out[i] *= inverse;
        }
    }
}

/* q [T, H, D], k/v caches [N_blocks, block, Hkv, D] (float32, contiguous), tables [S, width], seq_lens [S],
 * starts [S + 1] (int64) -> out [T, H, D]. Returns 0, or -1 when H is not a multiple of Hkv. */
int STRATA_ATTENTION_ENTRY(const float *q, int64_t heads, int64_t dim, const float *k, const float *v,
                           int64_t block, int64_t kv_heads, const int64_t *tables, int64_t width,
                           const int64_t *seq_lens, const int64_t *starts, int64_t num_seqs, float scale,
                           float *out, int threads) {
    if (kv_heads <= 0 || heads % kv_heads != 0) return -1;
    /* [S + 1] each sequence's first item of phase 1 and [S + 1] its first part row, then the parts */
    int64_t *item_starts = malloc(sizeof(int64_t) * (size_t)(2 * num_seqs + 2));
    if (item_starts == NULL) abort();
    int64_t *part_starts = item_starts + num_seqs + 1;
    item_starts[0] = part_starts[0] = 0;
    int one_split = 1;  /* every sequence in one split: phase 1 writes the output rows and no merge follows */
    for (int64_t s = 0; s < num_seqs; s++) {
        const int64_t splits = seq_lens[s] > 0 ? (seq_lens[s] + SPLIT - 1) / SPLIT : 0;
        item_starts[s + 1] = item_starts[s] + splits * kv_heads;
        part_starts[s + 1] = part_starts[s] + splits * (starts[s + 1] - starts[s]) * heads;
        one_split &= splits <= 1;
    }
    float *parts = one_split ? NULL : malloc(sizeof(float) * (size_t)(part_starts[num_seqs] * (dim + 2)));
    if (!one_split && parts == NULL) abort();
    const attention_t ctx = {q, k, v, out, tables, seq_lens, starts, heads, kv_heads, dim, block, width, num_seqs,
                             scale, item_starts, part_starts, parts};
    const phase_t phases[2] = {{attend_split, item_starts[num_seqs], threads}, {merge, num_seqs * kv_heads, threads}};
    strata_qmm_run_phases(phases, one_split ? 1 : 2, &ctx);
    free(parts);
    free(item_starts);
    return 0;
}
