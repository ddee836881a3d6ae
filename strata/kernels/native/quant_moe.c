/* One MoE layer's routed experts on GGUF blocks, on the CPU: for every pair p (row r, expert e, weight w)
 *   out[r] += w * W2[e] (silu(G[e] x_r) * U[e] x_r),   G / U the gate / up rows of w13, x_r = hidden[r],
 * the weights never dequantized: the same plan as strata/experts/cpu_moe.c (float weights) on
 * quant_matmul.c's row kernels, activation quantizer and pool.
 *
 * The pairs are grouped by expert (stably: a group keeps the pairs' order), and each group's pairs take
 * "slots" from a multiple of MAX_T, the kernels' row tile, so one decode of a weight row serves up to
 * MAX_T pairs of its expert. The work is one job of items in three runs, each item waiting only for items
 * before it (claimed in order, so already running: no barrier between the stages, and no thread idles at
 * a stage's end while another stage's work is ready):
 *   1. items = pairs: the pair's hidden row quantized into its slot (at w13's activation block);
 *   2. items = (group, chunk of I): act [slot, I] = silu(gate) * up in float32, the chunk's gate and up
 *      rows over the group's tiles, once its pairs' rows are quantized; the group's last chunk to finish
 *      quantizes the group's act rows (at w2's activation block);
 *   3. items = chunks of D columns: out, each over the groups in ascending expert (waiting for each one's
 *      act), then their pairs in order: every output is summed in one fixed order whatever the threads,
 *      and no two items write the same value (no atomics).
 * Each distinct expert's bytes are read from memory once per call: a chunk's rows stay in cache over a
 * group's tiles. */
#include <math.h>
#include <stdlib.h>

#include "quant_matmul.h"

enum { MAX_CHUNK = 32 };  /* weight rows an item (run 2: of gate and of up; run 3: of down) */

typedef struct {  /* one projection of every expert: row r of expert e at w + e * expert_stride + r * row_stride */
    const uint8_t *w;
    int64_t expert_stride, row_stride;
    rows_fn kernel;
} experts_t;

typedef struct {
    int64_t d, inter, groups;
    const float *hidden;     /* [R, D] */
    float *out;              /* [R, D] */
    experts_t w13, w2;       /* [E, 2I, D] (gate rows, then up rows), [E, D, I] */
    int64_t *group_expert;   /* [G] ascending */
    int64_t *group_slot;     /* [G] the group's first slot, a multiple of MAX_T */
    int64_t *group_end;      /* [G] the slot after its last pair */
    int64_t *pair_slot;      /* [P] the slot of each pair, in group order */
    int64_t *pair_group;     /* [P] the group of each pair, in group order */
    int64_t *slot_row;       /* [S] the row of hidden and out of the slot's pair */
    float *slot_weight;      /* [S] */
    /* the stages' progress by group, each [G], zeroed: pairs quantized, chunks of act done, act quantized */
    int64_t *hidden_done, *chunks_done, *act_ready;
    acts_t x13, x2;          /* the quantized hidden rows [S, D] and act [S, I] */
    float *act;              /* [S, I] */
    int64_t pairs, chunk_i, chunks_i, chunk_d;
} moe_t;

static int tile_rows(const moe_t *m, int64_t g, int64_t t0) {
    return m->group_end[g] - t0 < MAX_T ? (int)(m->group_end[g] - t0) : MAX_T;
}

static void quantize_hidden_item(const moe_t *m, int64_t pair) {
    const int64_t slot = m->pair_slot[pair];
    strata_qmm_quantize_row(m->hidden + m->slot_row[slot] * m->d, slot, &m->x13);
    __atomic_add_fetch(&m->hidden_done[m->pair_group[pair]], 1, __ATOMIC_RELEASE);
}

static float silu(float g) { return g / (1.f + expf(-g)); }

static void quantize_group_act(const moe_t *m, int64_t g) {
    for (int64_t slot = m->group_slot[g]; slot < m->group_end[g]; slot++)
        strata_qmm_quantize_row(m->act + slot * m->inter, slot, &m->x2);
    __atomic_store_n(&m->act_ready[g], 1, __ATOMIC_RELEASE);
}

static void gate_up_item(const moe_t *m, int64_t item) {
    const int64_t g = item / m->chunks_i, j0 = item % m->chunks_i * m->chunk_i, inter = m->inter;
    const int64_t rows = j0 + m->chunk_i <= inter ? m->chunk_i : inter - j0;
    const uint8_t *gate_w = m->w13.w + m->group_expert[g] * m->w13.expert_stride + j0 * m->w13.row_stride;
    const uint8_t *up_w = gate_w + inter * m->w13.row_stride;
    float gate[MAX_T * MAX_CHUNK], up[MAX_T * MAX_CHUNK];  /* [nt, rows] */
    strata_qmm_wait_until(&m->hidden_done[g], m->group_end[g] - m->group_slot[g]);  /* the group's pairs */
    for (int64_t t0 = m->group_slot[g]; t0 < m->group_end[g]; t0 += MAX_T) {
        const int nt = tile_rows(m, g, t0);
        m->w13.kernel(gate_w, m->w13.row_stride, rows, &m->x13, t0, nt, gate, rows);
        m->w13.kernel(up_w, m->w13.row_stride, rows, &m->x13, t0, nt, up, rows);
        for (int t = 0; t < nt; t++) {
            float *act = m->act + (t0 + t) * inter + j0;
            for (int64_t r = 0; r < rows; r++) act[r] = silu(gate[t * rows + r]) * up[t * rows + r];
        }
    }
    if (__atomic_add_fetch(&m->chunks_done[g], 1, __ATOMIC_ACQ_REL) == m->chunks_i) quantize_group_act(m, g);
}

static void down_item(const moe_t *m, int64_t item) {
    const int64_t n0 = item * m->chunk_d, d = m->d, cols = n0 + m->chunk_d <= d ? m->chunk_d : d - n0;
    float y[MAX_T * MAX_CHUNK];  /* [nt, cols] */
    for (int64_t g = 0; g < m->groups; g++) {
        const uint8_t *w = m->w2.w + m->group_expert[g] * m->w2.expert_stride + n0 * m->w2.row_stride;
        strata_qmm_wait_until(&m->act_ready[g], 1);
        for (int64_t t0 = m->group_slot[g]; t0 < m->group_end[g]; t0 += MAX_T) {
            const int nt = tile_rows(m, g, t0);
            m->w2.kernel(w, m->w2.row_stride, cols, &m->x2, t0, nt, y, cols);
            for (int t = 0; t < nt; t++) {
                float *out = m->out + m->slot_row[t0 + t] * d + n0;
                const float weight = m->slot_weight[t0 + t];
                for (int64_t c = 0; c < cols; c++) out[c] += weight * y[t * cols + c];
            }
        }
    }
}

static void moe_item(const void *ctx, int64_t item) {  /* the three runs of items, in the order they are claimed */
    const moe_t *m = ctx;
    const int64_t gate_up_items = m->groups * m->chunks_i;
    if (item < m->pairs) quantize_hidden_item(m, item);
    else if (item < m->pairs + gate_up_items) gate_up_item(m, item - m->pairs);
    else down_item(m, item - m->pairs - gate_up_items);
}

typedef struct {
    int64_t expert, pair;
} pair_key_t;

static int by_expert(const void *a, const void *b) {  /* ties keep the pairs' order */
    const pair_key_t *x = a, *y = b;
    if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
    return x->pair < y->pair ? -1 : x->pair > y->pair;
}

static int64_t chunk_of(int64_t n, int threads) {  /* ~8 items a thread: balance, little contention */
    const int64_t chunk = n / ((int64_t)threads * 8);
    return chunk < 1 ? 1 : chunk > MAX_CHUNK ? MAX_CHUNK : chunk;
}

/* Groups the pairs by expert into m's arrays (keys: scratch); returns the number of slots. */
static int64_t group_pairs(int64_t pairs, const int64_t *rows, const int64_t *experts, const float *weights,
                           pair_key_t *keys, moe_t *m) {
    for (int64_t p = 0; p < pairs; p++) keys[p] = (pair_key_t){experts[p], p};
    qsort(keys, (size_t)pairs, sizeof(pair_key_t), by_expert);
    int64_t groups = 0, slot = 0;
    for (int64_t p = 0; p < pairs; p++) {
        if (p == 0 || keys[p].expert != keys[p - 1].expert) {
            slot = (slot + MAX_T - 1) / MAX_T * MAX_T;
            m->group_expert[groups] = keys[p].expert;
            m->group_slot[groups++] = slot;
        }
        m->pair_slot[p] = slot;
        m->pair_group[p] = groups - 1;
        m->slot_row[slot] = rows[keys[p].pair];
        m->slot_weight[slot++] = weights[keys[p].pair];
        m->group_end[groups - 1] = slot;
    }
    m->groups = groups;
    return slot;
}

/* out [R, d] += the experts of the pairs (rows, experts, weights: [pairs]) on hidden [R, d]; w13 holds
 * qtype13 rows of d values [E, 2 inter] (gate, then up), w2 qtype2 rows of inter values [E, d], row r of
 * expert e at w + e * expert_stride + r * row_stride. On `threads` threads, the caller included. Returns
 * 0; 1 when scratch memory could not be had; 2 for a type it does not handle, or d or inter not a
 * multiple of its block; 3 for a row outside [0, num_rows), 4 for an expert outside [0, num_experts) (checked
 * here: a loop over the pairs costs less than the caller's numpy reductions, on every offloaded layer's call). */
int strata_qmoe(const float *hidden, float *out, int64_t d, int64_t inter, int64_t pairs, const int64_t *rows,
                const int64_t *experts, const float *weights, int qtype13, const uint8_t *w13,
                int64_t w13_expert_stride, int64_t w13_row_stride, int qtype2, const uint8_t *w2,
                int64_t w2_expert_stride, int64_t w2_row_stride, int threads, int64_t num_rows, int64_t num_experts) {
    if (!strata_qmm_supports(qtype13) || !strata_qmm_supports(qtype2)) return 2;
    for (int64_t p = 0; p < pairs; p++) {
        if (rows[p] < 0 || rows[p] >= num_rows) return 3;
        if (experts[p] < 0 || experts[p] >= num_experts) return 4;
    }
    int64_t block13, bytes13, qb13, block2, bytes2, qb2;
    strata_qmm_type_sizes(qtype13, &block13, &bytes13, &qb13);
    strata_qmm_type_sizes(qtype2, &block2, &bytes2, &qb2);
    if (d <= 0 || inter <= 0 || d % block13 != 0 || inter % block2 != 0) return 2;
    if (pairs <= 0) return 0;
    if (threads < 1) threads = 1;
    /* the grouping: keys, 8 arrays of [P] (groups are at most pairs) and 2 of slots (at most MAX_T a pair) */
    char *index = calloc((size_t)pairs, sizeof(pair_key_t) + 8 * sizeof(int64_t) +
                                            MAX_T * (sizeof(int64_t) + sizeof(float)));
    if (index == NULL) return 1;
    pair_key_t *keys = (pair_key_t *)index;
    moe_t m = {.d = d, .inter = inter, .hidden = hidden, .out = out,
               .w13 = {w13, w13_expert_stride, w13_row_stride, strata_qmm_rows(qtype13)},
               .w2 = {w2, w2_expert_stride, w2_row_stride, strata_qmm_rows(qtype2)},
               .group_expert = (int64_t *)(keys + pairs)};
    m.group_slot = m.group_expert + pairs, m.group_end = m.group_slot + pairs, m.pair_slot = m.group_end + pairs;
    m.pair_group = m.pair_slot + pairs, m.hidden_done = m.pair_group + pairs, m.chunks_done = m.hidden_done + pairs;
    m.act_ready = m.chunks_done + pairs, m.slot_row = m.act_ready + pairs;
    m.slot_weight = (float *)(m.slot_row + MAX_T * pairs);
    const int64_t slots = group_pairs(pairs, rows, experts, weights, keys, &m);
    /* the activations: hidden rows quantized [S, D], act [S, I], act quantized [S, I] */
    const size_t x13_bytes = strata_qmm_acts_bytes(slots, d, qb13);
    const size_t act_bytes = (sizeof(float) * (size_t)(slots * inter) + 63) / 64 * 64;
    char *scratch = aligned_alloc(64, x13_bytes + act_bytes + strata_qmm_acts_bytes(slots, inter, qb2));
    if (scratch == NULL) {
        free(index);
        return 1;
    }
    m.x13 = strata_qmm_acts_at(scratch, slots, d, qb13);
    m.act = (float *)(scratch + x13_bytes);
    m.x2 = strata_qmm_acts_at(scratch + x13_bytes + act_bytes, slots, inter, qb2);
    m.chunk_i = chunk_of(m.groups * inter, threads), m.chunks_i = (inter + m.chunk_i - 1) / m.chunk_i;
    m.chunk_d = chunk_of(d, threads);
    m.pairs = pairs;
    const phase_t job = {moe_item, pairs + m.groups * m.chunks_i + (d + m.chunk_d - 1) / m.chunk_d, threads};
    strata_qmm_run_phases(&job, 1, &m);
    free(scratch);
    free(index);
    return 0;
}
