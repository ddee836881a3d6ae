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

/* y [t, n] float32 = x [t, k] float32 @ dequant(w [n, k / block * bytes]).T on `threads` threads (the
 * caller included); row i of y at y + i * ldy (ldy >= n: y may be columns of a wider output). Returns 0; 2 for a
 * type it does not handle or k not a multiple of the block. */
int strata_dqmm(int qtype, const float *x, int64_t t, const uint8_t *w, int64_t n, int64_t k, float *y, int64_t ldy,
                int threads) {
    if (!strata_qmm_supports(qtype)) return 2;
    int64_t block, bytes, act_block;
    strata_qmm_type_sizes(qtype, &block, &bytes, &act_block);
    if (k <= 0 || k % block != 0) return 2;
    if (t <= 0 || n <= 0) return 0;
    if (threads < 1) threads = 1;
    int64_t chunk_rows = n / ((int64_t)threads * 8);  /* ~8 chunks a thread: balance, little contention */
    chunk_rows = chunk_rows < 1 ? 1 : chunk_rows > 64 ? 64 : chunk_rows;
    const dq_matmul_t m = {.x = x, .kernel = strata_dqmm_rows(qtype),
                           .many = t >= DQ_MANY_MIN ? strata_dqmm_many(qtype) : NULL, .w = w,
                           .row_bytes = k / block * bytes, .n = n, .k = k, .t = t, .chunk_rows = chunk_rows,
                           .ldy = ldy, .y = y};
    const phase_t phase = {dq_matmul_item, (n + chunk_rows - 1) / chunk_rows, threads};
    strata_qmm_run_phases(&phase, 1, &m);
    return 0;
}
