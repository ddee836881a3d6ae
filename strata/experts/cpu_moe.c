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
#include <sched.h>
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

#if defined(__AVX512BF16__) && !defined(STRATA_NO_DPBF16)
#define USE_DPBF16 1
#endif
#ifndef STRATA_PREFETCH_BYTES
#define STRATA_PREFETCH_BYTES 1024  /* ahead of the loads: rows are 1.5-4 KB, the next row follows */
#endif

/* x: float32 values; xb: the same values as bf16 bits (they are bf16 numbers: rows of the hidden
 * states, activations rounded to bf16), used by the AVX512-BF16 dot product instruction. */
static float dot_bf16(const uint16_t *w, const float *x, const uint16_t *xb, int64_t n) {
    int64_t i = 0;
    float tail = 0.f;
    (void)xb;
#ifdef __AVX512F__
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(w + i) + STRATA_PREFETCH_BYTES, _MM_HINT_T0);
#ifdef USE_DPBF16
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(w + i), (__m512bh)_mm512_loadu_si512(xb + i));
        a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(w + i + 32), (__m512bh)_mm512_loadu_si512(xb + i + 32));
#else
        for (int h = 0; h < 64; h += 32) {
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i + h)));
            __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + i + h + 16)));
            a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)), _mm512_loadu_ps(x + i + h), a0);
            a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)), _mm512_loadu_ps(x + i + h + 16), a1);
        }
#endif
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

/* ---- a persistent pool: run(phases) calls phase 0's fn(ctx, i) for every i, then, once every
 * thread is done with phase 0, phase 1's: one wake-up of the workers per call. Idle workers sleep on
 * a condition variable; at the barrier and for the finish threads pause, then yield.
 * (Workers spinning between calls were tried on the H200 host: no faster, and they burn idle cores.) */

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

/* Wait for *value >= target: pause a while, then yield the core, so a thread that is behind (fewer
 * cores than threads, or another process on the core) gets to run instead of being spun against. */
static void wait_at_least(int *value, int target) {
    for (int spin = 0; __atomic_load_n(value, __ATOMIC_ACQUIRE) < target; spin++) {
        if (spin < 2000) CPU_RELAX();
        else sched_yield();
    }
}

typedef void (*item_fn)(const void *ctx, int64_t item);

typedef struct {
    item_fn fn[2];
    int64_t items[2];
    const void *ctx;
} job_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_start = PTHREAD_COND_INITIALIZER;
static int pool_threads = 0, pool_done = 0, pool_arrived = 0;
static uint64_t pool_generation = 0;
static job_t pool_job;
static int64_t pool_next[2];

static void work(const job_t *job, int participants) {
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {  /* phase 1 reads what phase 0 wrote: wait for every thread */
            __atomic_add_fetch(&pool_arrived, 1, __ATOMIC_ACQ_REL);
            wait_at_least(&pool_arrived, participants);
        }
        for (;;) {
            int64_t i = __atomic_fetch_add(&pool_next[phase], 1, __ATOMIC_RELAXED);
            if (i >= job->items[phase]) break;
            job->fn[phase](job->ctx, i);
        }
    }
}

static void *worker(void *arg) {
    uint64_t seen = (uint64_t)(uintptr_t)arg;  /* the generation when it was created: only later calls count it */
    for (;;) {
        pthread_mutex_lock(&pool_mu);
        while (pool_generation == seen) pthread_cond_wait(&pool_start, &pool_mu);
        seen = pool_generation;
        job_t job = pool_job;
        int participants = pool_threads + 1;
        pthread_mutex_unlock(&pool_mu);
        work(&job, participants);
        __atomic_add_fetch(&pool_done, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER;  /* one call at a time uses the pool */

static void reset_in_child(void);
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reset_in_child); }

/* A forked child has none of the parent's workers (and maybe a lock held by one): it starts over with
 * an empty pool, where the calling thread does every item itself. */
static void reset_in_child(void) {
    pthread_mutex_init(&pool_mu, NULL);
    pthread_mutex_init(&call_mu, NULL);
    pthread_cond_init(&pool_start, NULL);
    pool_threads = 0;
}

/* Start workers up to num_threads - 1 (the caller is the last one); returns the pool size. */
int strata_cpu_moe_threads(int num_threads) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_handler);
    pthread_mutex_lock(&call_mu);  /* not while a call is using the pool */
    pthread_mutex_lock(&pool_mu);
    while (pool_threads < num_threads - 1) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(uintptr_t)pool_generation) != 0) break;
        pthread_detach(t);
        pool_threads++;
    }
    int size = pool_threads + 1;
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&call_mu);
    return size;
}

static void run(const job_t *job) {  /* the caller holds call_mu */
    pthread_mutex_lock(&pool_mu);
    pool_job = *job;
    pool_next[0] = pool_next[1] = 0;
    pool_arrived = pool_done = 0;
    int participants = pool_threads + 1;
    pool_generation++;
    pthread_cond_broadcast(&pool_start);
    pthread_mutex_unlock(&pool_mu);
    work(job, participants);
    wait_at_least(&pool_done, participants - 1);  /* every worker is done with this call's job */
}

/* ---- the layer ------------------------------------------------------------------------------ */

enum { CHUNK_I = 32, CHUNK_D = 32 };

typedef struct {
    int dtype;
    int64_t D, I, num_groups;
    const float *x;                         /* [R, D] float32 copy of the rows */
    const uint16_t *xb;                     /* [R, D] the rows as bf16 bits (bf16 weights only) */
    const void *w13, *w2;                   /* [E, 2I, D], [E, D, I] */
    const int64_t *group_expert;            /* [G] */
    const int64_t *group_start;             /* [G + 1] into the pairs, grouped by expert */
    const int64_t *pair_row;                /* [P] */
    const float *pair_weight;               /* [P] */
    float *act;                             /* [P, I] */
    uint16_t *act_b;                        /* [P, I] act as bf16 bits (bf16 weights only) */
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
                const uint16_t *w = (const uint16_t *)L->w13 + e * 2 * I * D, *xb = L->xb + L->pair_row[p] * D;
                gate = round_to_bf16(dot_bf16(w + j * D, x, xb, D));
                up = round_to_bf16(dot_bf16(w + (I + j) * D, x, xb, D));
                float a = round_to_bf16(round_to_bf16(silu(gate)) * up);
                uint32_t bits;
                memcpy(&bits, &a, 4);
                L->act[p * I + j] = a;
                L->act_b[p * I + j] = (uint16_t)(bits >> 16);
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
                float y = L->dtype == 1 ? dot_bf16((const uint16_t *)L->w2 + (e * D + n) * I, L->act + p * I,
                                                   L->act_b + p * I, I)
                                        : dot_f32((const float *)L->w2 + (e * D + n) * I, L->act + p * I, I);
                L->out[L->pair_row[p] * D + n] += L->pair_weight[p] * y;
            }
        }
    }
}

typedef struct {
    int64_t expert, index;
} pair_key_t;

static int by_expert(const void *a, const void *b) {  /* stable: ties keep the pairs' order */
    const pair_key_t *x = a, *y = b;
    if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* out [R, D] (float32) += for every pair p, pair_weight[p] * expert pair_expert[p] (x[pair_row[p]]).
 * x [R, D] is in the weights' dtype (bf16 bits for dtype 1). Returns 0, or 1 when scratch memory
 * could not be had. */
int strata_cpu_moe(int dtype, const void *x, int64_t D, int64_t I, const void *w13, const void *w2,
                   int64_t pairs, const int64_t *pair_row, const int64_t *pair_expert, const float *pair_weight,
                   float *out) {
    if (pairs <= 0) return 0;
    int64_t rows = 0;
    for (int64_t p = 0; p < pairs; p++) rows = pair_row[p] + 1 > rows ? pair_row[p] + 1 : rows;
    /* scratch: act [P, I] float32 (+ the rows as float32 for bf16), act as bf16 bits, the pairs
     * grouped by expert (keys, rows, weights, group experts and starts) */
    size_t floats = (size_t)(pairs * I) + (dtype == 1 ? (size_t)(rows * D) : 0);
    size_t bytes = sizeof(float) * (floats + (size_t)pairs) + sizeof(int64_t) * (size_t)(3 * pairs + 1) +
                   sizeof(pair_key_t) * (size_t)pairs + sizeof(uint16_t) * (size_t)(pairs * I) + 64;
    char *scratch = malloc(bytes);
    if (scratch == NULL) return 1;
    pair_key_t *keys = (pair_key_t *)scratch;
    int64_t *rows_sorted = (int64_t *)(keys + pairs), *group_expert = rows_sorted + pairs;
    int64_t *group_start = group_expert + pairs;
    float *weights_sorted = (float *)(group_start + pairs + 1), *act = weights_sorted + pairs;
    float *xf = (float *)x;
    uint16_t *act_b = (uint16_t *)(act + floats);
    const uint16_t *xb = (const uint16_t *)x;
    for (int64_t p = 0; p < pairs; p++) keys[p] = (pair_key_t){pair_expert[p], p};
    qsort(keys, (size_t)pairs, sizeof(pair_key_t), by_expert);
    int64_t groups = 0;
    for (int64_t p = 0; p < pairs; p++) {
        if (p == 0 || keys[p].expert != keys[p - 1].expert) {
            group_expert[groups] = keys[p].expert;
            group_start[groups++] = p;
        }
        rows_sorted[p] = pair_row[keys[p].index];
        weights_sorted[p] = pair_weight[keys[p].index];
    }
    group_start[groups] = pairs;
    if (dtype == 1) {
        xf = act + pairs * I;
        for (int64_t k = 0; k < rows * D; k++) xf[k] = bf16_to_f32(xb[k]);
    }
    layer_t L = {dtype, D, I, groups, xf, xb, w13, w2, group_expert, group_start, rows_sorted, weights_sorted,
                 act, act_b, out};
    job_t job = {{gate_up_item, down_item}, {groups * ((I + CHUNK_I - 1) / CHUNK_I), (D + CHUNK_D - 1) / CHUNK_D}, &L};
    pthread_mutex_lock(&call_mu);
    run(&job);
    pthread_mutex_unlock(&call_mu);
    free(scratch);
    return 0;
}
