/* y [T, N] = x [T, K] @ W.T in float32 for W [N, K] stored as GGUF blocks, each weight dequantized exactly
 * as gguf-py does (quant_matmul.h states the kernels' contract), on the CPU: no activation rounding, so a
 * float32 model gives what it gives on the dense dequantized weight, up to the order of the sums.
 *
 * The output rows are split into chunks that quant_matmul.c's pool (the caller included) takes in turn;
 * each chunk runs x in tiles of DQ_T rows, so a weight row is read from memory once per call and decoded
 * once per tile (from DQ_MANY_MIN rows of x, where the ISA has a many-rows form, once per call). Every output
 * is summed by one thread in an order that depends on neither the thread count nor the tile: the bits do not
 * change with the batch or the threads. */
#include "quant_matmul.h"

typedef struct {
    const float *x;        /* [T, K] */
    dq_rows_fn kernel;
    dq_many_fn many;       /* NULL: tiles of DQ_T rows */
    const uint8_t *w;      /* [N, row_bytes] */
    int64_t row_bytes, n, k, t, chunk_rows, ldy;
    float *y;              /* [T, N], rows ldy apart */
} dq_matmul_t;

static void dq_matmul_item(const void *ctx, int64_t chunk) {  /* output rows chunk * chunk_rows.., all of T */
    const dq_matmul_t *m = ctx;
    const int64_t r0 = chunk * m->chunk_rows;
    const int64_t rows = r0 + m->chunk_rows <= m->n ? m->chunk_rows : m->n - r0;
    if (m->many != NULL &&
        m->many(m->w + r0 * m->row_bytes, m->row_bytes, rows, m->x, m->k, m->t, m->y + r0, m->ldy) == 0)
        return;  /* else (no scratch) the tiles below: the same bits */
    for (int64_t t0 = 0; t0 < m->t; t0 += DQ_T) {
        const int nt = m->t - t0 < DQ_T ? (int)(m->t - t0) : DQ_T;
        m->kernel(m->w + r0 * m->row_bytes, m->row_bytes, rows, m->x + t0 * m->k, m->k, nt, m->y + t0 * m->ldy + r0,
                  m->ldy);
    }
}

/* One segment's product as dq_matmul_item runs it, with chunks of chunk_rows output rows for `threads` threads;
 * returns 2 for a type it does not handle or k not a multiple of the block, else 0. */
static int dq_matmul_of(int qtype, const float *x, int64_t t, const uint8_t *w, int64_t n, int64_t k, float *y,
                        int64_t ldy, int64_t chunk_rows, dq_matmul_t *m) {
    if (!strata_qmm_supports(qtype)) return 2;
    int64_t block, bytes, act_block;
    strata_qmm_type_sizes(qtype, &block, &bytes, &act_block);
    if (k <= 0 || k % block != 0) return 2;
    *m = (dq_matmul_t){.x = x, .kernel = strata_dqmm_rows(qtype),
                       .many = t >= DQ_MANY_MIN ? strata_dqmm_many(qtype, t) : NULL, .w = w,
                       .row_bytes = k / block * bytes, .n = n, .k = k, .t = t, .chunk_rows = chunk_rows,
                       .ldy = ldy, .y = y};
    return 0;
}

static int64_t chunk_rows_for(int64_t n, int threads) {  /* ~8 chunks a thread: balance, little contention */
    const int64_t rows = n / ((int64_t)threads * 8);
    return rows < 1 ? 1 : rows > 64 ? 64 : rows;
}

/* y [t, n] float32 = x [t, k] float32 @ dequant(w [n, k / block * bytes]).T on `threads` threads (the
 * caller included); row i of y at y + i * ldy (ldy >= n: y may be columns of a wider output). Returns 0; 2 for a
 * type it does not handle or k not a multiple of the block. */
int strata_dqmm(int qtype, const float *x, int64_t t, const uint8_t *w, int64_t n, int64_t k, float *y, int64_t ldy,
                int threads) {
    if (threads < 1) threads = 1;
    dq_matmul_t m;
    if (dq_matmul_of(qtype, x, t, w, n, k, y, ldy, chunk_rows_for(n, threads), &m) != 0) return 2;
    if (t <= 0 || n <= 0) return 0;
    const phase_t phase = {dq_matmul_item, (n + m.chunk_rows - 1) / m.chunk_rows, threads};
    strata_qmm_run_phases(&phase, 1, &m);
    return 0;
}

/* ---- several row segments of one weight in one call (a fused qkv or gate/up of parts kept apart) ---------- */

#define DQ_MAX_SEGMENTS 8

typedef struct {
    dq_matmul_t parts[DQ_MAX_SEGMENTS];
    int64_t first_chunk[DQ_MAX_SEGMENTS + 1];  /* segment s owns chunks first_chunk[s] .. first_chunk[s + 1] - 1 */
    int count;
} dq_segments_t;

static void dq_segments_item(const void *ctx, int64_t chunk) {
    const dq_segments_t *m = ctx;
    int s = 0;
    while (chunk >= m->first_chunk[s + 1]) s++;
    dq_matmul_item(&m->parts[s], chunk - m->first_chunk[s]);
}

/* strata_dqmm over `count` (<= DQ_MAX_SEGMENTS) row segments one after the other: segment s (qtypes[s], ws[s] of
 * ns[s] rows) writes y's columns from the sum of the earlier segments' rows. One pool job for all, each output
 * computed as strata_dqmm computes it (the same bits). Returns 0; 2 for a type it does not handle, k not a
 * multiple of a block, or more segments than it takes. */
int strata_dqmm_segments(int count, const int *qtypes, const uint8_t *const *ws, const int64_t *ns, const float *x,
                         int64_t t, int64_t k, float *y, int64_t ldy, int threads) {
    if (count < 1 || count > DQ_MAX_SEGMENTS) return 2;
    if (threads < 1) threads = 1;
    dq_segments_t m = {.count = count};
    int64_t total = 0, column = 0;
    for (int s = 0; s < count; s++) total += ns[s];
    const int64_t chunk_rows = chunk_rows_for(total, threads);
    m.first_chunk[0] = 0;
    for (int s = 0; s < count; s++) {
        if (dq_matmul_of(qtypes[s], x, t, ws[s], ns[s], k, y + column, ldy, chunk_rows, &m.parts[s]) != 0) return 2;
        m.first_chunk[s + 1] = m.first_chunk[s] + (ns[s] + chunk_rows - 1) / chunk_rows;
        column += ns[s];
    }
    if (t <= 0 || total <= 0) return 0;
    const phase_t phase = {dq_segments_item, m.first_chunk[count], threads};
    strata_qmm_run_phases(&phase, 1, &m);
    return 0;
}
