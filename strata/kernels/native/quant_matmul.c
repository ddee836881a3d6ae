/* y [T, N] = x [T, K] @ W.T for W [N, K] stored as GGUF blocks (rows exactly as in the file), on the CPU.
 *
 * Built at first use by strata/kernels/cpu_quant.py and called through ctypes (which releases the GIL).
 * One call: quantize x per block to int8 (see quant_matmul.h: the only approximation, ~0.4 % of a block's
 * largest |x| per value at most), then split the output rows N into chunks that a persistent pthread pool
 * (the caller included) takes in turn; each chunk runs the rows of x in tiles of MAX_T, so a weight row
 * is decoded once per tile and read from memory once per call. The kernels come from one of four
 * tables, chosen once from what this CPU supports (__builtin_cpu_supports): AVX-512 with VBMI (the AVX-512
 * one with iquant_vbmi.c's i-quants), AVX-512 (VNNI), AVX2, or the portable C ones; strata_qmm_set_isa() can
 * force a lower one (tests, debugging). The quantizer, the
 * kernels and the pool also serve quant_moe.c (a MoE layer's experts in one call). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "iquant.h"

enum { ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, ISA_AVX512_VBMI = 3, NUM_ISAS = 4 };

static rows_fn tables[NUM_ISAS][NUM_TYPES];
static dq_rows_fn dq_tables[NUM_ISAS][NUM_TYPES];  /* dequant_matmul.c's kernels; AVX-512 runs the AVX2 ones */
static dq_many_fn dq_many_tables[NUM_ISAS][NUM_TYPES];  /* their prompt-chunk forms (none portable) */
static dq_many_fn dq_wide_tables[NUM_ISAS][NUM_TYPES];  /* AVX-512's from DQ_WIDE_MIN rows of x */
static int isa_best = ISA_SCALAR, isa_current = ISA_SCALAR;

static void init_tables(void) {
    strata_qmm_table_scalar(tables[ISA_SCALAR]);
    strata_dqmm_table_scalar(dq_tables[ISA_SCALAR]);
#ifdef STRATA_X86_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        strata_qmm_table_avx2(tables[ISA_AVX2]);
        strata_dqmm_table_avx2(dq_tables[ISA_AVX2]);
        strata_dqmm_many_table_avx2(dq_many_tables[ISA_AVX2]);
        isa_best = ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
            strata_qmm_table_avx512(tables[ISA_AVX512]);
            strata_dqmm_table_avx2(dq_tables[ISA_AVX512]);
            strata_dqmm_many_table_avx2(dq_many_tables[ISA_AVX512]);
            strata_dqmm_many_table_avx512(dq_wide_tables[ISA_AVX512]);
            isa_best = ISA_AVX512;
            if (__builtin_cpu_supports("avx512vbmi")) {  /* its i-quants come with their tables */
                memcpy(tables[ISA_AVX512_VBMI], tables[ISA_AVX512], sizeof(tables[ISA_AVX512]));
                memcpy(dq_tables[ISA_AVX512_VBMI], dq_tables[ISA_AVX512], sizeof(dq_tables[ISA_AVX512]));
                memcpy(dq_many_tables[ISA_AVX512_VBMI], dq_many_tables[ISA_AVX512], sizeof(dq_many_tables[0]));
                memcpy(dq_wide_tables[ISA_AVX512_VBMI], dq_wide_tables[ISA_AVX512], sizeof(dq_wide_tables[0]));
                isa_best = ISA_AVX512_VBMI;
            }
        }
    }
#endif
    isa_current = isa_best;
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

int strata_qmm_best_isa(void) {
    pthread_once(&tables_once, init_tables);
    return isa_best;
}

/* Use `isa` (at most the best one) from now on; returns the one in use. */
int strata_qmm_set_isa(int isa) {
    pthread_once(&tables_once, init_tables);
    if (isa >= ISA_SCALAR && isa <= isa_best) isa_current = isa;
    return isa_current;
}

/* ---- the i-quants' code books (iquant.h) ------------------------------------------------------------ */

iq_tables_t strata_iq __attribute__((aligned(64)));
static int iq_ready = 0;  /* strata_iq holds gguf-py's tables */

static int is_iquant(int qtype) {
#define IS_TYPE(name, id) qtype == id ||
    return IQ_TYPES(IS_TYPE) 0;
#undef IS_TYPE
}

/* Copies gguf-py's grids (rows of 8 or 4 int8 values: [256][8], [512][8], [1024][8], [256][4], [512][4],
 * [2048][8]) and its 128 sign codes; from then on the i-quants are supported. Once they are, later calls
 * change nothing (a product may be reading them). Returns 0, or 1 (nothing copied) when a grid value is out of
 * the range that the kernels' exact products and int8 dot products assume (iquant.h). */
int strata_qmm_set_iq_tables(const int8_t *iq2_xxs, const int8_t *iq2_xs, const int8_t *iq2_s, const int8_t *iq3_xxs,
                             const int8_t *iq3_s, const int8_t *iq1_s, const uint8_t *ksigns) {
    const struct { void *to; const int8_t *from; size_t bytes; int low, high; } parts[] = {
        {strata_iq.iq2_xxs, iq2_xxs, sizeof(strata_iq.iq2_xxs), 0, 63},
        {strata_iq.iq2_xs, iq2_xs, sizeof(strata_iq.iq2_xs), 0, 63},
        {strata_iq.iq2_s, iq2_s, sizeof(strata_iq.iq2_s), 0, 63},
        {strata_iq.iq3_xxs, iq3_xxs, sizeof(strata_iq.iq3_xxs), 0, 63},
        {strata_iq.iq3_s, iq3_s, sizeof(strata_iq.iq3_s), 0, 63},
        {strata_iq.iq1_s, iq1_s, sizeof(strata_iq.iq1_s), -1, 1},
        {strata_iq.ksigns, (const int8_t *)ksigns, sizeof(strata_iq.ksigns), -128, 127},  /* any sign bits */
    };
    const int count = (int)(sizeof(parts) / sizeof(parts[0]));
    pthread_once(&tables_once, init_tables);
    if (__atomic_load_n(&iq_ready, __ATOMIC_ACQUIRE)) return 0;
    for (int p = 0; p < count; p++)
        for (size_t i = 0; i < parts[p].bytes; i++)
            if (parts[p].from[i] < parts[p].low || parts[p].from[i] > parts[p].high) return 1;
    for (int p = 0; p < count; p++) memcpy(parts[p].to, parts[p].from, parts[p].bytes);
#ifdef STRATA_X86_SIMD
    if (isa_best == ISA_AVX512_VBMI) strata_qmm_table_avx512vbmi(tables[ISA_AVX512_VBMI], strata_iq_vbmi_prepare());
#endif
    __atomic_store_n(&iq_ready, 1, __ATOMIC_RELEASE);
    return 0;
}

int strata_qmm_supports(int qtype) {
    pthread_once(&tables_once, init_tables);
    return qtype >= 0 && qtype < NUM_TYPES && tables[ISA_SCALAR][qtype] != NULL &&
           (!is_iquant(qtype) || __atomic_load_n(&iq_ready, __ATOMIC_ACQUIRE));
}

rows_fn strata_qmm_rows(int qtype) { return tables[isa_current][qtype]; }

dq_rows_fn strata_dqmm_rows(int qtype) { return dq_tables[isa_current][qtype]; }

dq_many_fn strata_dqmm_many(int qtype, int64_t t) {
    dq_many_fn wide = t >= DQ_WIDE_MIN ? dq_wide_tables[isa_current][qtype] : NULL;
    return wide != NULL ? wide : dq_many_tables[isa_current][qtype];
}

void strata_qmm_type_sizes(int qtype, int64_t *block, int64_t *bytes, int64_t *act_block) {
    switch (qtype) {
    case T_Q8_0: *block = QK, *bytes = sizeof(block_q8_0), *act_block = QK; break;
    case T_Q4_0: *block = QK, *bytes = sizeof(block_q4_0), *act_block = QK; break;
    case T_Q4_1: *block = QK, *bytes = sizeof(block_q4_1), *act_block = QK; break;
    case T_Q5_0: *block = QK, *bytes = sizeof(block_q5_0), *act_block = QK; break;
    case T_Q5_1: *block = QK, *bytes = sizeof(block_q5_1), *act_block = QK; break;
    case T_IQ4_NL: *block = QK, *bytes = sizeof(block_iq4_nl), *act_block = QK; break;
    case T_MXFP4: *block = QK, *bytes = sizeof(block_mxfp4), *act_block = QK; break;
    case T_Q2_K: *block = QK_K, *bytes = sizeof(block_q2_k), *act_block = QK_K; break;
    case T_Q3_K: *block = QK_K, *bytes = sizeof(block_q3_k), *act_block = QK_K; break;
    case T_Q4_K: *block = QK_K, *bytes = sizeof(block_q4_k), *act_block = QK_K; break;
    case T_Q5_K: *block = QK_K, *bytes = sizeof(block_q5_k), *act_block = QK_K; break;
    case T_Q6_K: *block = QK_K, *bytes = sizeof(block_q6_k), *act_block = QK_K; break;
    case T_IQ2_XXS: *block = QK_K, *bytes = sizeof(block_iq2_xxs), *act_block = QK_K; break;
    case T_IQ2_XS: *block = QK_K, *bytes = sizeof(block_iq2_xs), *act_block = QK_K; break;
    case T_IQ2_S: *block = QK_K, *bytes = sizeof(block_iq2_s), *act_block = QK_K; break;
    case T_IQ3_XXS: *block = QK_K, *bytes = sizeof(block_iq3_xxs), *act_block = QK_K; break;
    case T_IQ3_S: *block = QK_K, *bytes = sizeof(block_iq3_s), *act_block = QK_K; break;
    case T_IQ1_S: *block = QK_K, *bytes = sizeof(block_iq1_s), *act_block = QK_K; break;
    case T_IQ1_M: *block = QK_K, *bytes = sizeof(block_iq1_m), *act_block = QK_K; break;
    default: *block = QK_K, *bytes = sizeof(block_iq4_xs), *act_block = QK_K; break;
    }
}

/* ---- activations: x ~= d * q per block of qb values (round to nearest even, like np.rint) ------ */

static int64_t acts_floats(int64_t t, int64_t k, int64_t qb) {  /* the scales, bsum by tile and by row, bsum16 */
    return (t + MAX_T - 1) / MAX_T * MAX_T * (k / qb + 2 * k / QK + k / 16);
}

size_t strata_qmm_acts_bytes(int64_t t, int64_t k, int64_t qb) {
    return ((sizeof(float) * (size_t)acts_floats(t, k, qb) + (size_t)(t * k)) + 63) / 64 * 64;
}

acts_t strata_qmm_acts_at(void *scratch, int64_t t, int64_t k, int64_t qb) {
    const int64_t tiles = (t + MAX_T - 1) / MAX_T;
    float *d = scratch, *bsum = d + tiles * MAX_T * (k / qb), *bsum_rows = bsum + tiles * MAX_T * (k / QK);
    float *bsum16_rows = bsum_rows + tiles * MAX_T * (k / QK);
    memset(d, 0, sizeof(float) * (size_t)acts_floats(t, k, qb));
    return (acts_t){(int8_t *)(d + acts_floats(t, k, qb)), d, bsum, bsum_rows, bsum16_rows, k, qb};
}

void strata_qmm_quantize_row(const float *x, int64_t t, const acts_t *acts) {
    const int64_t k = acts->k, qb = acts->qb, tile = t / MAX_T * MAX_T, lane = t % MAX_T;
    int8_t *q = acts->q + t * k;
    float *d = acts->d, *bsum = acts->bsum, *bsum_row = acts->bsum_rows + t * (k / QK);
    float *bsum16_row = acts->bsum16_rows + t * (k / 16);
    for (int64_t b = 0; b < k / qb; b++) {
        const float *xb = x + b * qb;
        float amax = 0.f;
        for (int64_t i = 0; i < qb; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        const float scale = amax / 127.f, inverse = scale != 0.f ? 1.f / scale : 0.f;
        d[(tile * (k / qb) + b * MAX_T) + lane] = scale;
        for (int64_t i = 0; i < qb; i++) {
            /* adding 1.5 * 2^23 rounds |v| <= 127 to the nearest integer, ties to even, in float32 */
            const float v = xb[i] * inverse;
            q[b * qb + i] = (int8_t)((int32_t)((v + 12582912.f) - 12582912.f));
        }
        for (int64_t j = b * qb / QK; j < (b + 1) * qb / QK; j++) {
            int32_t sum[2] = {0, 0};  /* of each 16 values: exact, so the sum of 32 is the same either way */
            for (int i = 0; i < QK; i++) sum[i / 16] += q[j * QK + i];
            bsum16_row[2 * j] = scale * (float)sum[0], bsum16_row[2 * j + 1] = scale * (float)sum[1];
            bsum[(tile * (k / QK) + j * MAX_T) + lane] = bsum_row[j] = scale * (float)(sum[0] + sum[1]);
        }
    }
}

/* ---- the pool ------------------------------------------------------------------------------------
 * Each job (a phase: quantizing the rows of x, then the matmul's chunks of output rows, say) is a
 * generation: the caller writes the job, publishes its item limit and ticket, bumps the generation and
 * takes items itself; workers that see the new generation copy the job and take items too. An item is
 * taken by a compare-and-swap on the ticket (generation << 32 | next item), so only an item of the
 * generation a worker copied the job for: a worker that wakes late (its core busy) takes nothing, and
 * the caller waits only for the items taken, never for a worker to be scheduled. A successful claim
 * also proves the worker's copy of the job was made before the generation ended (the caller rewrites
 * the job, and frees what its ctx points to, only after all its items are done).
 *
 * Decode runs a few hundred of these calls per token with short gaps between them: a worker that went
 * to sleep costs a futex wake-up (tens of microseconds, more for a halted virtual CPU) at the next call, so
 * workers poll for a while after a call (strata_qmm_set_spin_us; 200 us unless set), yielding the core to
 * anyone else who wants it, before they sleep. */
static int64_t spin_ns = 200000;

/* How long idle workers poll before they sleep, in microseconds (>= 0); returns the previous value. */
int strata_qmm_set_spin_us(int us) {
    const int previous = (int)(__atomic_load_n(&spin_ns, __ATOMIC_RELAXED) / 1000);
    if (us >= 0) __atomic_store_n(&spin_ns, (int64_t)us * 1000, __ATOMIC_RELAXED);
    return previous;
}

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

typedef struct {
    void (*run_item)(const void *ctx, int64_t item);
    const void *ctx;       /* read by the items only: valid while the generation lasts */
    int64_t items;
    int workers;           /* how many pool workers take part */
} job_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER, call_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static int pool_workers = 0;    /* started; they never exit */
static uint32_t pool_generation = 0;
static uint64_t pool_limit = 0;   /* generation << 32 | number of items */
static uint64_t pool_ticket = 0;  /* generation << 32 | next item */
static int64_t pool_done = 0;     /* items of the current generation finished */
static job_t pool_job;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t claim(uint32_t generation) {  /* the next item of `generation`, or -1 */
    const uint64_t limit = __atomic_load_n(&pool_limit, __ATOMIC_ACQUIRE);
    uint64_t ticket = __atomic_load_n(&pool_ticket, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((uint32_t)(limit >> 32) != generation || (uint32_t)(ticket >> 32) != generation ||
            (uint32_t)ticket >= (uint32_t)limit)
            return -1;
        if (__atomic_compare_exchange_n(&pool_ticket, &ticket, ticket + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return (uint32_t)ticket;
    }
}

static void run_items(const job_t *job, uint32_t generation) {
    for (int64_t item; (item = claim(generation)) >= 0;) {
        job->run_item(job->ctx, item);
        __atomic_add_fetch(&pool_done, 1, __ATOMIC_RELEASE);
    }
}

static uint32_t wait_for_generation(uint32_t seen) {
    const int64_t start = now_ns();
    for (int spin = 0;; spin++) {
        const uint32_t g = __atomic_load_n(&pool_generation, __ATOMIC_ACQUIRE);
        if (g != seen) return g;
        if (spin % 64 != 63) {
            CPU_RELAX();
        } else if (now_ns() - start < __atomic_load_n(&spin_ns, __ATOMIC_RELAXED)) {
            sched_yield();
        } else {
            pthread_mutex_lock(&pool_mu);
            while (__atomic_load_n(&pool_generation, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&pool_wake, &pool_mu);
            pthread_mutex_unlock(&pool_mu);
        }
    }
}

static void *worker(void *arg) {
    const int index = (int)(intptr_t)arg;
    uint32_t seen = __atomic_load_n(&pool_generation, __ATOMIC_ACQUIRE);
    for (;;) {
        seen = wait_for_generation(seen);
        job_t job = pool_job;  /* may be torn if this generation is already over: then claim() refuses */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (index < job.workers) run_items(&job, seen);
    }
    return NULL;
}

static void reset_in_child(void) {  /* a forked child has no workers: it starts over with none */
    pthread_mutex_init(&pool_mu, NULL);
    pthread_mutex_init(&call_mu, NULL);
    pthread_cond_init(&pool_wake, NULL);
    pool_workers = 0;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reset_in_child); }

static void start_workers(int count) {  /* the caller holds call_mu */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_handler);
    while (pool_workers < count) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker, (void *)(intptr_t)pool_workers) != 0) return;
        pthread_detach(thread);
        pool_workers++;
    }
}

void strata_qmm_wait_until(const int64_t *counter, int64_t value) {
    for (int spin = 0; __atomic_load_n(counter, __ATOMIC_ACQUIRE) < value; spin++) {
        if (spin < 4000) CPU_RELAX();
        else sched_yield();
    }
}

static void run_job(job_t *job, int threads) {  /* the caller holds call_mu */
    if (job->items <= 0) return;
    if (threads > job->items) threads = (int)job->items;
    start_workers(threads - 1);
    job->workers = threads - 1 < pool_workers ? threads - 1 : pool_workers;
    const uint32_t generation = pool_generation + 1;
    pool_job = *job;
    __atomic_store_n(&pool_done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool_limit, (uint64_t)generation << 32 | (uint64_t)job->items, __ATOMIC_RELEASE);
    __atomic_store_n(&pool_ticket, (uint64_t)generation << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&pool_generation, generation, __ATOMIC_RELEASE);
    if (job->workers > 0) {  /* wake the sleepers (one between its check and its wait holds the mutex) */
        pthread_mutex_lock(&pool_mu);
        pthread_cond_broadcast(&pool_wake);
        pthread_mutex_unlock(&pool_mu);
    }
    run_items(job, generation);
    strata_qmm_wait_until(&pool_done, job->items);
}

void strata_qmm_run_phases(const phase_t *phases, int count, const void *ctx) {
    pthread_mutex_lock(&call_mu);
    for (int i = 0; i < count; i++) {
        job_t job = {.run_item = phases[i].run_item, .ctx = ctx, .items = phases[i].items};
        run_job(&job, phases[i].threads < 1 ? 1 : phases[i].threads);
    }
    pthread_mutex_unlock(&call_mu);
}

/* ---- the entry point ---------------------------------------------------------------------------- */

typedef struct {
    const float *x;        /* [T, K] */
    acts_t acts;           /* x quantized */
    rows_fn kernel;
    const uint8_t *w;      /* [N, row_bytes] */
    int64_t row_bytes, n, t, chunk_rows, ldy;
    float *y;              /* [T, N], rows ldy apart */
} matmul_t;

static void quantize_item(const void *ctx, int64_t row) {
    const matmul_t *m = ctx;
    strata_qmm_quantize_row(m->x + row * m->acts.k, row, &m->acts);
}

static void matmul_item(const void *ctx, int64_t chunk) {  /* output rows chunk * chunk_rows.., all of T */
    const matmul_t *m = ctx;
    const int64_t r0 = chunk * m->chunk_rows;
    const int64_t rows = r0 + m->chunk_rows <= m->n ? m->chunk_rows : m->n - r0;
    for (int64_t t0 = 0; t0 < m->t; t0 += MAX_T) {
        const int nt = m->t - t0 < MAX_T ? (int)(m->t - t0) : MAX_T;
        m->kernel(m->w + r0 * m->row_bytes, m->row_bytes, rows, &m->acts, t0, nt, m->y + t0 * m->ldy + r0, m->ldy);
    }
}

/* y [t, n] float32 = x [t, k] float32 @ dequant(w [n, k / block * bytes]).T on `threads` threads (the
 * caller included); row i of y at y + i * ldy (ldy >= n: y may be columns of a wider output). Returns 0; 1 when scratch memory could not be had; 2 for a type it does not
 * handle or k not a multiple of the block. */
int strata_qmm(int qtype, const float *x, int64_t t, const uint8_t *w, int64_t n, int64_t k, float *y, int64_t ldy,
               int threads) {
    if (!strata_qmm_supports(qtype)) return 2;
    int64_t block, bytes, act_block;
    strata_qmm_type_sizes(qtype, &block, &bytes, &act_block);
    if (k <= 0 || k % block != 0) return 2;
    if (t <= 0 || n <= 0) return 0;
    void *scratch = aligned_alloc(64, strata_qmm_acts_bytes(t, k, act_block));
    if (scratch == NULL) return 1;
    if (threads < 1) threads = 1;
    int64_t chunk_rows = n / ((int64_t)threads * 8);  /* ~8 chunks a thread: balance, little contention */
    chunk_rows = chunk_rows < 1 ? 1 : chunk_rows > 64 ? 64 : chunk_rows;
    const matmul_t m = {.x = x, .acts = strata_qmm_acts_at(scratch, t, k, act_block), .kernel = strata_qmm_rows(qtype),
                        .w = w, .row_bytes = k / block * bytes, .n = n, .t = t, .chunk_rows = chunk_rows, .ldy = ldy,
                        .y = y};
    const phase_t phases[2] = {{quantize_item, t, t * k >= PARALLEL_QUANTIZE ? threads : 1},  /* ~1 ms / M values */
                               {matmul_item, (n + chunk_rows - 1) / chunk_rows, threads}};
    strata_qmm_run_phases(phases, 2, &m);
    free(scratch);
    return 0;
}
