/* An offloaded MoE layer's host part in one call (strata/experts/native_host_part.py): what
 * OffloadedExperts._host_part does in numpy and torch between two graphs of a replayed step, for the
 * default plan (no PCIe staging), so the step's critical path holds no Python between the device's copies
 * and the CPU experts. From the buffers the graph copied out (HostExchange):
 *   1. cpu_sum's first `rows` rows are zeroed (padding rows included: the next graph adds them all);
 *   2. the pairs of the first `real_rows` rows whose slot is MISSED are listed in row-major order (the
 *      order numpy's nonzero gives, so the sum is the one the Python part gets, bit for bit);
 *   3. those rows' 16-bit hidden values are widened to float32 (exact) and strata_qmoe adds the pairs;
 *   4. totals[0] = the CPU's pairs, totals[1] = the pairs read in place (slot IN_PLACE); with row_counts,
 *      row_counts[r] += CPU pairs of row r and row_counts[real_rows + r] += its pairs read in place. */
#include <string.h>

#include "quant_matmul.h"

enum { MISSED = -1, IN_PLACE = -2 };  /* provider.NOT_RESIDENT, provider.IN_PLACE */

typedef struct {  /* one offloaded layer's fixed arguments: pointers into the exchange and its host weights */
    const int64_t *slot_ids;     /* [N, K] each pair's device slot, MISSED or IN_PLACE */
    const int64_t *topk_ids;     /* [N, K] */
    const float *topk_weights;   /* [N, K] */
    const uint16_t *hidden;      /* [N, D] bfloat16, or float16 where hidden_f16 */
    float *cpu_sum;              /* [N, D] */
    float *hidden_f32;           /* [N, D] scratch */
    int64_t *pair_rows;          /* [N * K] scratch */
    int64_t *pair_experts;       /* [N * K] scratch */
    float *pair_weights;         /* [N * K] scratch */
    int64_t max_rows, top_k, d, inter, num_experts;
    int64_t hidden_f16;
    int64_t qtype13, qtype2;
    const uint8_t *w13, *w2;
    int64_t w13_expert_stride, w13_row_stride, w2_expert_stride, w2_row_stride;
} host_part_t;

static float bf16_to_f32(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Returns strata_qmoe's status (0 done), or 5 for rows outside [0, max_rows] or real_rows > rows. */
int strata_qmoe_host_part(const host_part_t *p, int64_t rows, int64_t real_rows, int threads, int64_t *row_counts,
                          int64_t *totals) {
    if (rows < 0 || rows > p->max_rows || real_rows < 0 || real_rows > rows) return 5;
    memset(p->cpu_sum, 0, sizeof(float) * (size_t)(rows * p->d));
    int64_t pairs = 0, in_place = 0;
    if (row_counts != NULL) memset(row_counts, 0, sizeof(int64_t) * (size_t)(2 * real_rows));
    for (int64_t r = 0; r < real_rows; r++) {
        int64_t row_pairs = 0;
        for (int64_t k = 0; k < p->top_k; k++) {
            const int64_t at = r * p->top_k + k, slot = p->slot_ids[at];
            if (slot == MISSED) {
                p->pair_rows[pairs] = r;
                p->pair_experts[pairs] = p->topk_ids[at];
                p->pair_weights[pairs++] = p->topk_weights[at];
                row_pairs++;
            } else if (slot == IN_PLACE) {
                in_place++;
                if (row_counts != NULL) row_counts[real_rows + r]++;
            }
        }
        if (row_counts != NULL) row_counts[r] += row_pairs;
        if (row_pairs == 0) continue;
        const uint16_t *h = p->hidden + r * p->d;
        float *x = p->hidden_f32 + r * p->d;
        for (int64_t i = 0; i < p->d; i++) x[i] = p->hidden_f16 ? fp16_to_f32(h[i]) : bf16_to_f32(h[i]);
    }
    totals[0] = pairs, totals[1] = in_place;
    if (pairs == 0) return 0;
    return strata_qmoe(p->hidden_f32, p->cpu_sum, p->d, p->inter, pairs, p->pair_rows, p->pair_experts,
                       p->pair_weights, (int)p->qtype13, p->w13, p->w13_expert_stride, p->w13_row_stride,
                       (int)p->qtype2, p->w2, p->w2_expert_stride, p->w2_row_stride, threads, real_rows,
                       p->num_experts);
}
