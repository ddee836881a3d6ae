/* A stack of plain decoder layers (Llama's: RMSNorm, fused qkv, rotary, paged attention, o_proj, RMSNorm, SwiGLU
 * MLP; Qwen3's with its query and key heads' RMSNorms) for one decode or short-window step of the CPU path, in one
 * call (strata/kernels/cpu_stack.py). The projections are dequant_matmul.c's (quant_matmul.c's with --cpu-matmul
 * int8: the same bits as the per-module path's either way), the rotary embedding and KV write rope_kv_cpu.c's (the
 * same bits), the attention the paged kernel the caller hands in (the same bits). What the per-module path leaves to
 * torch is done here in float32 with other roundings: the RMSNorms' sum of squares (8 lanes, then a fixed horizontal
 * sum, where torch's reduction picks its own order) and SiLU's exp (libm's, where torch takes a vector exp), each
 * within a few float32 ulps of torch's. The stack saves ~10 torch and Python calls a layer: on the 2-core VM they
 * were ~14 of a ~37 ms step of SmolLM2 at 8 streams. Built with -ffp-contract=off: the residual adds and the norms'
 * products round as torch's elementwise ops do. (A vectorizable polynomial exp, ~1.2 ulps, was slower than libm's
 * expf in SSE2 code here: 2.19 against 1.35 ms for a step's 30 layers of 8 x 1536 SiLUs; 1.06 with AVX2, a 1 % step
 * gain that did not pay for a second build.) */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant_matmul.h"

int strata_dqmm_segments(int count, const int *qtypes, const uint8_t *const *ws, const int64_t *ns, const float *x,
                         int64_t t, int64_t k, float *y, int64_t ldy, int threads);
int strata_qmm(int qtype, const float *x, int64_t t, const uint8_t *w, int64_t n, int64_t k, float *y, int64_t ldy,
               int threads);
int strata_rope_kv_f32(const float *qkv, int64_t tokens, int64_t ld, int64_t heads, int64_t kv_heads, int64_t dim,
                       int64_t rot_dim, const float *cos_rows, const float *sin_rows, const int64_t *slots,
                       int64_t num_slots, float *k_cache, float *v_cache, float *q_out);

typedef int (*attention_fn)(const float *q, int64_t heads, int64_t dim, const float *k, const float *v,
                            int64_t block, int64_t kv_heads, const int64_t *tables, int64_t width,
                            const int64_t *seq_lens, const int64_t *starts, int64_t num_seqs, float scale,
                            float *out, int threads);

enum { MAX_SEGMENTS = 8 };

typedef struct {              /* one weight [n, k] as row segments of GGUF blocks */
    int32_t count;
    int32_t int8;             /* products as quant_matmul.c's (--cpu-matmul int8), else dequant_matmul.c's */
    int32_t qtypes[MAX_SEGMENTS];
    const uint8_t *blocks[MAX_SEGMENTS];
    int64_t rows[MAX_SEGMENTS];
} weight_t;

typedef struct {              /* one layer's weights and KV pool */
    const float *norm_in, *norm_post;  /* [hidden] */
    const float *q_norm, *k_norm;      /* [D] each (Qwen3's RMSNorm of every query and key head), or NULL */
    weight_t qkv, o, gate_up, down;    /* [(H + 2 Hkv) D, hidden], [hidden, H D], [2 I, hidden], [hidden, I] */
    float *k_cache, *v_cache;          /* [N_blocks, block, Hkv, D] */
} layer_t;

typedef struct {              /* the step, shared by every layer */
    int64_t tokens, hidden, heads, kv_heads, dim, rot_dim, inter, block, num_slots;
    float eps, scale;
    const float *cos_rows, *sin_rows;  /* [T, rot_dim] */
    const int64_t *slots;              /* [T] */
    const int64_t *tables, *seq_lens, *starts;  /* [S, width], [S], [S + 1] */
    int64_t width, num_seqs;
    attention_fn attend;
    int32_t threads, attention_threads;
    float *scratch;                    /* T x (D + max((H + 2 Hkv) D, 3 I) + 2 H D) floats */
} step_t;

static float sum_squares(const float *x, int64_t n) {  /* 8 lanes, then a fixed order */
    float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += x[i + l] * x[i + l];
    float tail = 0.f;
    for (; i < n; i++) tail += x[i] * x[i];
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7])) + tail;
}

/* out = weight * (x * rsqrt(mean(x^2) + eps)) for each of T rows: rms_norm_ref's plain form */
static void rms_norm(const float *x, const float *weight, int64_t t, int64_t n, float eps, float *out) {
    for (int64_t r = 0; r < t; r++) {
        const float *row = x + r * n;
        const float inverse = 1.f / sqrtf(sum_squares(row, n) / (float)n + eps);
        for (int64_t i = 0; i < n; i++) out[r * n + i] = weight[i] * (row[i] * inverse);
    }
}

static int matmul(const weight_t *w, const float *x, int64_t t, int64_t k, float *y, int64_t n, int threads) {
    if (!w->int8) return strata_dqmm_segments(w->count, w->qtypes, w->blocks, w->rows, x, t, k, y, n, threads);
    for (int s = 0; s < w->count; y += w->rows[s], s++)  /* each segment into its columns, as the module path */
        if (strata_qmm(w->qtypes[s], x, t, w->blocks[s], w->rows[s], k, y, n, threads) != 0) return 2;
    return 0;
}

static int64_t weight_rows(const weight_t *w) {
    int64_t n = 0;
    for (int s = 0; s < w->count; s++) n += w->rows[s];
    return n;
}

/* `count` layers one after the other. hidden [T, D]: in, the previous block's output (the embeddings when
 * `first`); out, the last layer's MLP output. residual [T, D]: in, the residual so far (ignored when `first`); out,
 * the residual before the last MLP (DecoderLayer.forward's pair). Returns 0; 1 for a layer whose weights do not fit
 * the step's shapes; 2 for a weight's type or shape the matmul refuses; 3 for a slot outside the pool; 4 for the
 * attention's refusal (nothing is partly written but the KV of the layers before). */
int strata_dense_stack_f32(const step_t *s, const layer_t *layers, int count, int first, float *hidden,
                           float *residual) {
    const int64_t t = s->tokens, d = s->hidden, hd = s->heads * s->dim;
    const int64_t nqkv = (s->heads + 2 * s->kv_heads) * s->dim;
    float *x = s->scratch;                          /* [T, D] the normed rows */
    float *wide = x + t * d;                        /* [T, max(qkv, 3 I)]: qkv, then gate/up and the product */
    float *q = wide + t * (nqkv > 3 * s->inter ? nqkv : 3 * s->inter);  /* [T, H, D] rotated, then attended */
    float *attended = q + t * hd;
    for (int l = 0; l < count; l++) {
        const layer_t *layer = layers + l;
        if (weight_rows(&layer->qkv) != nqkv || weight_rows(&layer->o) != d ||
            weight_rows(&layer->gate_up) != 2 * s->inter || weight_rows(&layer->down) != d)
            return 1;
        if (first && l == 0) {
            memcpy(residual, hidden, (size_t)(t * d) * sizeof(float));
        } else {
            for (int64_t i = 0; i < t * d; i++) residual[i] = hidden[i] + residual[i];
        }
        rms_norm(residual, layer->norm_in, t, d, s->eps, x);
        if (matmul(&layer->qkv, x, t, d, wide, nqkv, s->threads) != 0) return 2;
        if (layer->q_norm != NULL)  /* each query head, then each key head, normed in place */
            for (int64_t r = 0; r < t; r++) {
                float *row = wide + r * nqkv;
                rms_norm(row, layer->q_norm, s->heads, s->dim, s->eps, row);
                rms_norm(row + hd, layer->k_norm, s->kv_heads, s->dim, s->eps, row + hd);
            }
        if (strata_rope_kv_f32(wide, t, nqkv, s->heads, s->kv_heads, s->dim, s->rot_dim, s->cos_rows, s->sin_rows,
                               s->slots, s->num_slots, layer->k_cache, layer->v_cache, q) != 0)
            return 3;
        if (s->attend(q, s->heads, s->dim, layer->k_cache, layer->v_cache, s->block, s->kv_heads, s->tables,
                      s->width, s->seq_lens, s->starts, s->num_seqs, s->scale, attended, s->attention_threads) != 0)
            return 4;
        if (matmul(&layer->o, attended, t, hd, hidden, d, s->threads) != 0) return 2;
        for (int64_t i = 0; i < t * d; i++) residual[i] = hidden[i] + residual[i];
        rms_norm(residual, layer->norm_post, t, d, s->eps, x);
        if (matmul(&layer->gate_up, x, t, d, wide, 2 * s->inter, s->threads) != 0) return 2;
        for (int64_t r = 0; r < t; r++) {  /* silu(gate) * up, into the third part of the row's room */
            const float *gate = wide + r * 2 * s->inter, *up = gate + s->inter;
            float *product = wide + t * 2 * s->inter + r * s->inter;
            for (int64_t i = 0; i < s->inter; i++) {
                const float silu = gate[i] / (1.f + expf(-gate[i]));
                product[i] = silu * up[i];
            }
        }
        if (matmul(&layer->down, wide + t * 2 * s->inter, t, s->inter, hidden, d, s->threads) != 0) return 2;
    }
    return 0;
}
