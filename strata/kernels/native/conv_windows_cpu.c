/* The depthwise causal conv of Gated DeltaNet (and PLE) layers on the CPU for a step's windows (decode, 1 + k
 * verification, prompt chunks), each sequence's last inputs read from and written back to its row of the state pool
 * (strata/kernels/cpu_gdn.py, conv_windows). The torch path (model/gated_delta_net.causal_conv1d_ragged) gathered
 * the histories, laid them out with the tokens in one tensor, summed W shifted products and scattered the new
 * histories: ~0.8 ms a layer for one decode token of Qwen3-Next's 8,192 channels on the 2-core VM.
 *   out[t, c] = sum_j w[c, j] * in[t - H + j * dilation, c],  j = 0..W-1 in order,  H = (W - 1) * dilation,
 * the inputs before a window's first token taken from the history (zeros for a fresh sequence). Each product and
 * each sum rounds once (built with -ffp-contract=off), in the torch path's order: the same bits as it, whatever the
 * window, batch, threads or vector width. One item of work is (sequence, chunk of channels). */
#include <stdint.h>
#include <string.h>

#include "quant_matmul.h"

enum { CHUNK = 128, BLOCK = 32, MAX_HISTORY = 32, MAX_WIDTH = 33 };

typedef struct {
    const float *x, *weight;
    float *state, *out, *window;
    const int64_t *slots, *begins, *ends, *has_initial;
    int64_t x_stride, channels, width, dilation, history, chunks;
} conv_t;

/* One (sequence, chunk of channels): its inputs laid out by token, channels innermost, BLOCK tokens at a time after
 * the H before them (ext), so every loop below runs over contiguous channels. */
static void run_chunk(const void *ctx, int64_t item) {
    const conv_t *a = ctx;
    const int64_t seq = item / a->chunks, c0 = item % a->chunks * CHUNK, hist = a->history, C = a->channels;
    const int64_t n = C - c0 < CHUNK ? C - c0 : CHUNK, width = a->width;
    float ext[MAX_HISTORY + BLOCK][CHUNK], taps[MAX_WIDTH][CHUNK];  /* inputs [H + block][c], weights [j][c] */
    float *rows = a->state + a->slots[seq] * C * hist;  /* the pool row [C, H] */
    const int by_tap = a->ends[seq] - a->begins[seq] > 4;  /* weights laid out by tap: worth it for longer windows */
    for (int64_t c = 0; c < n; c++) {
        for (int64_t j = 0; by_tap && j < width; j++) taps[j][c] = a->weight[(c0 + c) * width + j];
        for (int64_t h = 0; h < hist; h++) ext[h][c] = a->has_initial[seq] ? rows[(c0 + c) * hist + h] : 0.f;
    }
    const float *weight = a->weight + c0 * width;
    for (int64_t t0 = a->begins[seq]; t0 < a->ends[seq]; t0 += BLOCK) {
        const int64_t nb = a->ends[seq] - t0 < BLOCK ? a->ends[seq] - t0 : BLOCK;
        for (int64_t i = 0; i < nb; i++) memcpy(ext[hist + i], a->x + (t0 + i) * a->x_stride + c0, sizeof(float) * n);
        for (int64_t i = 0; i < nb; i++) {
            float *out = a->out + (t0 + i) * C + c0, acc[CHUNK];
            for (int64_t c = 0; c < n; c++) acc[c] = 0.f;  /* from zero, as the torch path's sum(): -0 sums to +0 */
            for (int64_t j = 0; j < width; j++) {
                const float *input = ext[i + j * a->dilation];  /* H - j * dilation inputs before token i */
                if (by_tap)
                    for (int64_t c = 0; c < n; c++) acc[c] = acc[c] + input[c] * taps[j][c];
                else
                    for (int64_t c = 0; c < n; c++) acc[c] = acc[c] + input[c] * weight[c * width + j];
            }
            memcpy(out, acc, sizeof(float) * n);
            if (a->window != NULL) {  /* the history after token i: its last H inputs, ext[i + 1 .. i + H] */
                float *window = a->window + ((t0 + i) * C + c0) * hist;
                for (int64_t c = 0; c < n; c++)
                    for (int64_t h = 0; h < hist; h++) window[c * hist + h] = ext[i + 1 + h][c];
            }
        }
        memmove(ext[0], ext[nb], sizeof(ext[0]) * hist);  /* the last H inputs lead the next block */
    }
    for (int64_t c = 0; c < n; c++)
        for (int64_t h = 0; h < hist; h++) rows[(c0 + c) * hist + h] = ext[h][c];
}

/* x [T, C] float32 (rows x_stride apart), weight [C, W]; state [num_slots, C, H] with H = (W - 1) * dilation; for each
 * of num_seqs sequences its pool row slots[s], its tokens begins[s] <= t < ends[s] and has_initial[s] (0: a zero
 * history) -> out [T, C] at those tokens, window [T, C, H] (NULL: none) the history after each of them, each
 * sequence's history after its last token in its pool row. Returns 0, or -1 (nothing done) for a slot outside the
 * pool, tokens outside [0, T), or a history longer than MAX_HISTORY (a width above MAX_WIDTH). */
int strata_conv_windows_f32(const float *x, int64_t x_stride, int64_t tokens, int64_t channels, const float *weight,
                            int64_t width, int64_t dilation, float *state, int64_t num_slots, const int64_t *slots,
                            const int64_t *begins, const int64_t *ends, const int64_t *has_initial, int64_t num_seqs,
                            float *out, float *window, int threads) {
    const int64_t history = (width - 1) * dilation;
    if (width < 2 || width > MAX_WIDTH || dilation < 1 || history > MAX_HISTORY) return -1;
    for (int64_t s = 0; s < num_seqs; s++)
        if (slots[s] < 0 || slots[s] >= num_slots || begins[s] < 0 || ends[s] > tokens || begins[s] > ends[s])
            return -1;
    const int64_t chunks = (channels + CHUNK - 1) / CHUNK;
    const conv_t ctx = {x, weight, state, out, window, slots, begins, ends, has_initial, x_stride, channels, width,
                        dilation, history, chunks};
    const phase_t phase = {run_chunk, num_seqs * chunks, threads};
    strata_qmm_run_phases(&phase, 1, &ctx);
    return 0;
}
