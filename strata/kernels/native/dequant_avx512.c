/* dequant_simd.c's prompt-chunk form in 512-bit registers, for AVX-512 CPUs (built with -mavx512f/bw/vl/vnni and
 * -ffp-contract=off; it includes dequant_simd.c for the decoders), used from DQ_WIDE_MIN rows of x.
 *
 * The weight rows are decoded in pairs into a buffer (two rows interleaved by 8 values), so two weight rows share
 * one 512-bit register, and each row of x's 8 values is broadcast to both halves: every half is one output's 8-lane
 * accumulator taking the AVX2 tile's FMAs in its order, then the same `reduce`, so the bits are rows_<type>'s (a row
 * alone, in a batch or in a prompt chunk: tests/kernels/test_cpu_dequant_matmul.py). A tile is PAIRS pairs x X_ROWS
 * rows of x (24 of the 32 registers). One thread, SmolLM2's Q4_1 projections at 512 rows on the 2-core Ice Lake VM:
 * ~64 GMAC/s against the AVX2 tile's ~45; from 64 rows down the AVX2 tile is as fast or faster. (5-8 rows of x of
 * Q4_0 / Q4_1 / Q8_0 decoded two weight rows at once in 512-bit registers were tried: no faster than the 256-bit
 * kernels at 8 rows on that VM, 20-23 GMAC/s a thread against 20-30.) */
#define STRATA_DQ_AVX512
#define DECODED_ROW(buf, r, k) ((buf) + (r) / 2 * 2 * (k) + (r) % 2 * 8)  /* pairs interleaved by 8 values */
enum { DECODED_STRIDE = 2 };
#include "dequant_simd.c"

enum { PAIRS = 4, X_ROWS = 6 };

INLINE __m256 upper_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

INLINE __m512 both_halves(const float *x) {  /* x's 8 values in both halves */
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x))));
}

/* y[t * ldy + r] = weight row r . x row t (ldx apart), r < rows (2 np - 1 or 2 np), t < nt; pairs: np pairs of
 * 2k floats, interleaved by 8 */
INLINE void pairs_tile(const float *pairs, const int np, const int rows, const float *x, int64_t ldx, const int nt,
                       int64_t k, float *y, int64_t ldy) {
    __m512 a[PAIRS][X_ROWS];
    for (int p = 0; p < np; p++)
        for (int t = 0; t < nt; t++) a[p][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        __m512 v[PAIRS];
        for (int p = 0; p < np; p++) v[p] = _mm512_loadu_ps(pairs + p * 2 * k + 2 * i);
        for (int t = 0; t < nt; t++) {
            const __m512 xv = both_halves(x + t * ldx + i);
            for (int p = 0; p < np; p++) a[p][t] = _mm512_fmadd_ps(v[p], xv, a[p][t]);
        }
    }
    for (int t = 0; t < nt; t++)
        for (int p = 0; p < np; p++) {
            y[t * ldy + 2 * p] = reduce(_mm512_castps512_ps256(a[p][t]));
            if (2 * p + 1 < rows) y[t * ldy + 2 * p + 1] = reduce(upper_half(a[p][t]));
        }
}

/* the nw rows decoded in pairs at buf (an odd last row paired with zeros), met by every row of x */
static void many_rows(float *buf, int nw, const float *x, int64_t k, int64_t t, float *y, int64_t ldy) {
    if (nw % 2)  /* the odd last row's partner: zeros */
        for (int64_t i = 0; i < k; i += 8) _mm256_storeu_ps(DECODED_ROW(buf, nw, k) + 2 * i, _mm256_setzero_ps());
    for (int64_t t0 = 0; t0 < t; t0 += X_ROWS) {
        const int nt = t - t0 < X_ROWS ? (int)(t - t0) : X_ROWS;
        for (int r = 0; r < nw; r += 2 * PAIRS) {
            const int rows = nw - r < 2 * PAIRS ? nw - r : 2 * PAIRS, np = (rows + 1) / 2;
            const float *w = buf + r * k, *xt = x + t0 * k;
            float *out = y + t0 * ldy + r;
            switch (nt * 8 + np) {  /* constant trip counts, so the accumulators stay in registers */
#define TILE(nt_, np_) case nt_ * 8 + np_: pairs_tile(w, np_, rows, xt, k, nt_, k, out, ldy); break;
#define TILES(nt_) TILE(nt_, 1) TILE(nt_, 2) TILE(nt_, 3) TILE(nt_, 4)
            TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6)
#undef TILES
#undef TILE
            }
        }
    }
}

void strata_dqmm_many_table_avx512(dq_many_fn table[NUM_TYPES]) {
    QMM_TYPES(MANY_ENTRY)
}
