/* What every x86 row kernel ends with (quant_simd.c, iquant_vbmi.c): a row's 8 float lanes summed in one fixed
 * order (so kernels that build the same lanes give the same bits), and the loop over a call's weight rows with
 * one body a row count. */
#ifndef STRATA_SIMD_ROWS_H
#define STRATA_SIMD_ROWS_H

#include <immintrin.h>

#include "quant_matmul.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INLINE void store_rows(const __m256 *acc, int nt, float *y, int64_t ldy) {
    for (int t = 0; t < nt; t++) y[t * ldy] = hsum(acc[t]);
}

/* Each row's bytes are prefetched PREFETCH_ROWS rows ahead (within the call's rows), so the loads of a few rows
 * ahead overlap the arithmetic of this one: a decode's experts come from memory, not the caches, and one core
 * left to its hardware prefetchers waited for them. On this VM's two cores, six pairs of the 30B-A3B's experts
 * (Q4_K gate/up, Q6_K down) drawn from 128: 2,079-2,464 us without, 1,406-1,418 at 4 rows, 1,306-1,498 at 8;
 * from the caches 813-997 us either way (tools/gpu_ab/qmoe_scale.py threads=2). */
#ifndef PREFETCH_ROWS
#define PREFETCH_ROWS 4
#endif
INLINE void prefetch_row(const uint8_t *w, int64_t row_bytes, int64_t r, int64_t rows) {
    if (PREFETCH_ROWS && r + PREFETCH_ROWS < rows)
        for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(w + (r + PREFETCH_ROWS) * row_bytes + o);
}

/* ROWS for a type whose one-row products take two weight rows a pass (name##_row_pair(w, row_bytes, count, x, t0,
 * y): count 1 or 2 rows from w, outputs y[0..count-1]); more rows of x go through ROWS's loop */
#define ROWS_PAIRED(name)                                                                                     \
    ROWS(name##_each)                                                                                         \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const acts_t *x, int64_t t0,   \
                            int nt, float *y, int64_t ldy) {                                                  \
        if (nt != 1) {                                                                                        \
            rows_##name##_each(w, row_bytes, rows, x, t0, nt, y, ldy);                                        \
            return;                                                                                           \
        }                                                                                                     \
        for (int64_t r = 0; r < rows; r += 2) {                                                               \
            prefetch_row(w, row_bytes, r, rows), prefetch_row(w, row_bytes, r + 1, rows);                     \
            name##_row_pair(w + r * row_bytes, row_bytes, rows - r < 2 ? 1 : 2, x, t0, y + r);                 \
        }                                                                                                     \
    }

/* One body per (type, number of rows): nt is a constant in each, so the row loops unroll. */
#define ROWS(name)                                                                                            \
    static void rows_##name(const uint8_t *w, int64_t row_bytes, int64_t rows, const acts_t *x, int64_t t0,   \
                            int nt, float *y, int64_t ldy) {                                                  \
        for (int64_t r = 0; r < rows; r++) {                                                                  \
            const uint8_t *wr = w + r * row_bytes;                                                            \
            prefetch_row(w, row_bytes, r, rows);                                                              \
            switch (nt) {                                                                                     \
            case 1: name##_row(wr, x, t0, 1, y + r, ldy); break;                                              \
            case 2: name##_row(wr, x, t0, 2, y + r, ldy); break;                                              \
            case 3: name##_row(wr, x, t0, 3, y + r, ldy); break;                                              \
            case 4: name##_row(wr, x, t0, 4, y + r, ldy); break;                                              \
            case 5: name##_row(wr, x, t0, 5, y + r, ldy); break;                                              \
            case 6: name##_row(wr, x, t0, 6, y + r, ldy); break;                                              \
            case 7: name##_row(wr, x, t0, 7, y + r, ldy); break;                                              \
            default: name##_row(wr, x, t0, 8, y + r, ldy); break;                                             \
            }                                                                                                 \
        }                                                                                                     \
    }

#endif
