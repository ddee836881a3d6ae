/* Routed experts of one MoE layer on the CPU: y[r] = sum over the pairs (r, e, w) routed to the CPU
 * of w * W2[e] (silu(W1[e] x_r) * W3[e] x_r), summed in float32.
 *
 * Built at first use by strata/experts/cpu_kernel.py (cc -O3 -march=native) and called through
 * ctypes, which releases the GIL: the calling thread joins a persistent pthread pool, so the GPU
 * keeps working on what was queued before the call. Two phases, each split into independent items:
 *   1. act[p, i] for every pair p, in chunks of the intermediate dimension per distinct expert;
 *   2. y[r, n] for every row, in chunks of the hidden dimension, over all experts: no two items
 *      write the same output, so no atomics, and the sum order is fixed (expert order, then pair).
 * Each distinct expert's weights are read once per call, whatever the number of rows using it.
 * Weights are float32 (dtype 0) or bfloat16 (dtype 1, raw uint16 bits) in the checkpoint layout:
 * w13 [E, 2I, D] (gate rows then up rows), w2 [E, D, I]. bf16 activations are rounded to bf16
 * between the two GEMVs, as the GPU kernels store them.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* ---- dot products of one weight row with a float32 vector ---------------------------------- */

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float round_to_bf16(float f) {  /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    int64_t i = 0;
    float tail = 0.f;
#ifdef __AVX512F__
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i)));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i + 16)));
        a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)), _mm512_loadu_ps(x + i + 16), a1);
    }
    tail = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#endif
    for (; i < n; i++) tail += bf16_to_f32(w[i]) * x[i];
    return tail;
}

static float dot_f32(const float *w, const float *x, int64_t n) {
    int64_t i = 0;
    float tail = 0.f;
#ifdef __AVX512F__
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    tail = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
#endif
    for (; i < n; i++) tail += w[i] * x[i];
    return tail;
}

/* ---- a persistent pool: run(items, fn) calls fn(ctx, i) once for every i, on every thread --- */

typedef void (*item_fn)(const void *ctx, int64_t item);

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_start = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0, pool_busy = 0;
static uint64_t pool_generation = 0;
static item_fn pool_fn;
static const void *pool_ctx;
static int64_t pool_items, pool_next;

static void drain(item_fn fn, const void *ctx, int64_t items) {
    for (;;) {
        int64_t i = __atomic_fetch_add(&pool_next, 1, __ATOMIC_RELAXED);
        if (i >= items) return;
        fn(ctx, i);
    }
}

static void *worker(void *arg) {
    (void)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (pool_generation == seen) pthread_cond_wait(&pool_start, &pool_mu);
        seen = pool_generation;
        item_fn fn = pool_fn;
        const void *ctx = pool_ctx;
        int64_t items = pool_items;
        pthread_mutex_unlock(&pool_mu);
        drain(fn, ctx, items);
        pthread_mutex_lock(&pool_mu);
        if (--pool_busy == 0) pthread_cond_signal(&pool_done);
    }
    return NULL;
}

/* Start workers up to num_threads - 1 (the caller is the last one); returns the pool size. */
int strata_cpu_moe_threads(int num_threads) {
    pthread_mutex_lock(&pool_mu);
    while (pool_threads < num_threads - 1) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0) break;
        pthread_detach(t);
        pool_threads++;
    }
    int size = pool_threads + 1;
    pthread_mutex_unlock(&pool_mu);
    return size;
}

static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER;  /* one call at a time uses the pool */

static void run(item_fn fn, const void *ctx, int64_t items) {
    pthread_mutex_lock(&pool_mu);
    pool_fn = fn;
    pool_ctx = ctx;
    pool_items = items;
    pool_next = 0;
    pool_busy = pool_threads;
    pool_generation++;
    pthread_cond_broadcast(&pool_start);
    pthread_mutex_unlock(&pool_mu);
    drain(fn, ctx, items);
    pthread_mutex_lock(&pool_mu);
    while (pool_busy > 0) pthread_cond_wait(&pool_done, &pool_mu);
    pthread_mutex_unlock(&pool_mu);
}

/* ---- the layer ------------------------------------------------------------------------------ */

enum { CHUNK_I = 32, CHUNK_D = 32 };

typedef struct {
    int dtype;
    int64_t D, I, num_groups;
    const float *x;                         /* [R, D] float32 copy of the rows */
    const void *w13, *w2;                   /* [E, 2I, D], [E, D, I] */
    const int64_t *group_expert;            /* [G] */
    const int64_t *group_start;             /* [G + 1] into the pairs, grouped by expert */
    const int64_t *pair_row;                /* [P] */
    const float *pair_weight;               /* [P] */
    float *act;                             /* [P, I] */
    float *out;                             /* [R, D] */
} layer_t;

static float silu(float g) { return g / (1.f + expf(-g)); }

static void gate_up_item(const void *ctx, int64_t item) {
    const layer_t *L = ctx;
    int64_t chunks = (L->I + CHUNK_I - 1) / CHUNK_I;
    int64_t g = item / chunks, j0 = (item % chunks) * CHUNK_I;
    int64_t j1 = j0 + CHUNK_I < L->I ? j0 + CHUNK_I : L->I;
    int64_t e = L->group_expert[g], D = L->D, I = L->I;
    for (int64_t j = j0; j < j1; j++) {
        for (int64_t p = L->group_start[g]; p < L->group_start[g + 1]; p++) {
            const float *x = L->x + L->pair_row[p] * D;
            float gate, up;
            if (L->dtype == 1) {
                const uint16_t *w = (const uint16_t *)L->w13 + e * 2 * I * D;
                gate = round_to_bf16(dot_bf16(w + j * D, x, D));
                up = round_to_bf16(dot_bf16(w + (I + j) * D, x, D));
                L->act[p * I + j] = round_to_bf16(round_to_bf16(silu(gate)) * up);
            } else {
                const float *w = (const float *)L->w13 + e * 2 * I * D;
                gate = dot_f32(w + j * D, x, D);
                up = dot_f32(w + (I + j) * D, x, D);
                L->act[p * I + j] = silu(gate) * up;
            }
        }
    }
}

static void down_item(const void *ctx, int64_t item) {
    const layer_t *L = ctx;
    int64_t n0 = item * CHUNK_D, n1 = n0 + CHUNK_D < L->D ? n0 + CHUNK_D : L->D;
    int64_t D = L->D, I = L->I;
    for (int64_t g = 0; g < L->num_groups; g++) {
        int64_t e = L->group_expert[g];
        for (int64_t n = n0; n < n1; n++) {
            for (int64_t p = L->group_start[g]; p < L->group_start[g + 1]; p++) {
                float y = L->dtype == 1 ? dot_bf16((const uint16_t *)L->w2 + (e * D + n) * I, L->act + p * I, I)
                                        : dot_f32((const float *)L->w2 + (e * D + n) * I, L->act + p * I, I);
                L->out[L->pair_row[p] * D + n] += L->pair_weight[p] * y;
            }
        }
    }
}

/* out [R, D] += the weighted expert outputs; act [P, I] is scratch. Returns 0. */
int strata_cpu_moe(int dtype, const float *x, int64_t D, int64_t I, const void *w13, const void *w2,
                   int64_t num_groups, const int64_t *group_expert, const int64_t *group_start,
                   const int64_t *pair_row, const float *pair_weight, float *act, float *out) {
    layer_t L = {dtype, D, I, num_groups, x, w13, w2, group_expert, group_start, pair_row, pair_weight, act, out};
    pthread_mutex_lock(&call_mu);
    run(gate_up_item, &L, num_groups * ((I + CHUNK_I - 1) / CHUNK_I));
    run(down_item, &L, (D + CHUNK_D - 1) / CHUNK_D);
    pthread_mutex_unlock(&call_mu);
    return 0;
}
