/* Rotary embedding and the KV write of a plain attention layer (Llama's: no qk-norm, no output gate) on the CPU
 * path, in one call: the fused qkv projection's rows in, the rotated queries out, the rotated keys and the values
 * written to the float32 KV pool at each token's slot (strata/kernels/cpu_attention.py's rope_kv).
 *
 * Each rotated value is HF's x * cos + rotate_half(x) * sin in float32: with the rows the torch path uses,
 * (cos, cos) and (-sin, sin) over the rotary dims, rotate_half(x) * sin is x[(d + half) % rot] * sin_row[d], so the
 * value is two rounded products and a rounded sum, as torch's three elementwise ops give them. Built with
 * -ffp-contract=off (no fused multiply-add): the same bits as the torch path. Dims past rot_dim are copied. */
#include <stdint.h>
#include <string.h>

/* qkv [T, ld] float32: each row's query heads, then key heads, then value heads, `dim` values each (head_dim);
 * cos_rows, sin_rows [T, rot_dim]; slots [T] (flat token slots of the pool); k_cache, v_cache [num_slots,
 * kv_heads, dim]; q_out [T, heads, dim]. Returns 0, or -1 (nothing written) for a slot outside the pool. */
int strata_rope_kv_f32(const float *qkv, int64_t tokens, int64_t ld, int64_t heads, int64_t kv_heads, int64_t dim,
                       int64_t rot_dim, const float *cos_rows, const float *sin_rows, const int64_t *slots,
                       int64_t num_slots, float *k_cache, float *v_cache, float *q_out) {
    const int64_t half = rot_dim / 2;
    for (int64_t t = 0; t < tokens; t++)
        if (slots[t] < 0 || slots[t] >= num_slots) return -1;
    for (int64_t t = 0; t < tokens; t++) {
        const float *row = qkv + t * ld, *c = cos_rows + t * rot_dim, *s = sin_rows + t * rot_dim;
        float *k_row = k_cache + slots[t] * kv_heads * dim;
        for (int64_t h = 0; h < heads + kv_heads; h++) {
            const float *x = row + h * dim;
            float *out = h < heads ? q_out + (t * heads + h) * dim : k_row + (h - heads) * dim;
            for (int64_t d = 0; d < half; d++) {
                const float direct = x[d] * c[d], turned = x[d + half] * s[d];
                out[d] = direct + turned;
            }
            for (int64_t d = half; d < rot_dim; d++) {
                const float direct = x[d] * c[d], turned = x[d - half] * s[d];
                out[d] = direct + turned;
            }
            if (dim > rot_dim)
                memcpy(out + rot_dim, x + rot_dim, (size_t)(dim - rot_dim) * sizeof(float));
        }
        memcpy(v_cache + slots[t] * kv_heads * dim, row + (heads + kv_heads) * dim,
               (size_t)(kv_heads * dim) * sizeof(float));
    }
    return 0;
}
