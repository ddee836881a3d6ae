/* The i-quants most 2-3-bit files hold (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), and IQ4_XS, for CPUs with AVX-512
 * VBMI (Zen 4 and later, Ice Lake and later), built with the AVX-512 table's flags plus -mavx512vbmi -mbmi2;
 * quant_matmul.c puts these rows functions in the "avx512vbmi" table over the AVX-512 ones once
 * strata_iq_vbmi_prepare has their code books.
 *
 * The AVX-512 table decodes a superblock by scalar loads (iquant_simd.h): a grid row, a sign code, an index byte
 * each. On the 2-core Zen 4 those loads were most of a one-row product (IQ2_XXS 384 us a pair of the 30B-A3B's
 * expert shape, 95 of them the grid rows and 80 the sign codes; IQ3_XXS 508, 220 of them its rows of 4). Here no
 * byte of a superblock is read twice and nothing is looked up in memory:
 * - each grid is two byte tables (a row's first half of values, then its second) of codes: a value's position among
 *   its type's 4 (IQ2) or 8 (IQ3) levels in 2 or 3 bits. 64 indices are looked up at once, by two two-vector byte
 *   permutes (vpermi2b) and a blend a 256 rows (their ninth and tenth bits in mask registers);
 * - 64 values are one two-source byte permute of the looked-up codes (each value beside its code byte), one
 *   vpmultishiftqb (its bits to the byte's bottom) and one byte permute of the levels;
 * - 7-bit sign codes become sign bytes by one two-vector byte permute of gguf's 128 sign bytes, and sign bytes
 *   are masks, 64 values a mask register: x takes w's sign by one masked subtraction.
 * IQ4_XS (16 levels, no grid) takes the same registers: its levels by one byte permute, its signs as masks, its
 * scales by vpmultishiftqb (one row: 215 -> 195 us a pair).
 * A row's integer sums are built in the lanes iquant_simd.h's kernels build them in (sums of exact products:
 * the order does not matter) and then scaled and summed by the same float operations, so each output has the
 * AVX-512 table's bits, alone or in a batch (tests/kernels/test_cpu_quant.py holds them to that). */
#include <stdlib.h>

#include "iquant_simd.h"
#include "simd_rows.h"

enum { VBMI_IQ2_XXS, VBMI_IQ2_XS, VBMI_IQ2_S, VBMI_IQ3_XXS, VBMI_IQ3_S, VBMI_TYPES };

/* Built once by strata_iq_vbmi_prepare from strata_iq: each grid row's code in two bytes (the first half of its
 * values and the second), each type's levels over 64 bytes (byte i: level i % count, so a byte permute needs no
 * mask), gguf's sign bytes, and the permutes' controls. */
static struct {
    uint8_t iq2_xxs[2][256], iq2_xs[2][512], iq2_s[2][1024], iq3_xxs[2][256], iq3_s[2][512];  /* [half][row] */
    uint8_t levels[VBMI_TYPES][64];
    uint8_t ksigns[128];
    /* byte permutes (two sources: the halves' lookups, first then second) that give byte j of vector m of a
     * superblock's values the code byte of its half: IQ2_XXS's rows are looked up at 8 (r / 4) + r % 4 (their
     * bytes in qs), IQ2_XS's at 2r, IQ2_S's and IQ3's at r */
    uint8_t pick_xxs[4][64], pick_xs[4][64], pick_s[4][64], pick_iq3[4][64];
    uint8_t shift2[64], shift3[64];  /* vpmultishiftqb: byte j of a quad word <- its value's 2 (3) bits */
    uint8_t sign_bytes32[64];  /* IQ2_*: byte s <- sign byte s, at byte 8 (s / 4) + s % 4 */
    uint8_t codes_xxs[64];     /* quad word g of IQ2_XXS's qs: its 4 sign codes (bits 32 + 7r) to bytes 0-3 */
    uint8_t codes_xs[64];      /* quad word q of IQ2_XS's qs: the codes of its 4 uint16 (bits 16r + 9) to bytes 0-3 */
    uint8_t codes_3[32];       /* quad word q of IQ3_XXS's uint32s: their 8 codes (bits 7r, 32 + 7r) to bytes 0-7 */
    uint16_t scale16[4][32];   /* word i <- the scale of the 16 values that 64m + 2i, 64m + 2i + 1 belong to */
    uint16_t scale16_32[4][32];  /* IQ4_XS: the same from a scale a 32 values */
    uint16_t nibble_shift[32];   /* IQ4_XS: 0 for the low nibbles' 16 bytes, 4 for the high ones' */
    uint8_t iq4_magnitudes[64];  /* |IQ4_VALUES[i % 16]| */
    uint8_t iq4_scale_low[16], iq4_scale_high[16];  /* IQ4_XS: byte j <- bits 16 + 4j (2j) of a scale word */
} vb __attribute__((aligned(64)));

INLINE __m512i load64(const void *p) { return _mm512_loadu_si512(p); }

/* the bytes of idx as indices (< 256) into a table of 256 bytes (4 vectors) */
INLINE __m512i lookup256(const uint8_t *table, __m512i idx) {
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx),
                                  _mm512_permutex2var_epi8(load64(table), idx, load64(table + 64)),
                                  _mm512_permutex2var_epi8(load64(table + 128), idx, load64(table + 192)));
}

/* the same into 512 bytes: bit i of ninth is the ninth bit of byte i's index */
INLINE __m512i lookup512(const uint8_t *table, __m512i idx, __mmask64 ninth) {
    return _mm512_mask_blend_epi8(ninth, lookup256(table, idx), lookup256(table + 256, idx));
}

/* the same into 1024 bytes: ninth and tenth the indices' ninth and tenth bits */
INLINE __m512i lookup1024(const uint8_t *table, __m512i idx, __mmask64 ninth, __mmask64 tenth) {
    return _mm512_mask_blend_epi8(tenth, lookup512(table, idx, ninth), lookup512(table + 512, idx, ninth));
}

/* vector m of a superblock's values from its rows' code bytes (first and second halves, placed as `pick` reads) */
INLINE __m512i values(__m512i first, __m512i second, const uint8_t *pick, const uint8_t *shift, const uint8_t *levels) {
    const __m512i codes = _mm512_permutex2var_epi8(first, load64(pick), second);
    return _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(load64(shift), codes), load64(levels));
}

/* 7-bit sign codes (bit 7 ignored) -> gguf's sign bytes (bit i: value i of the 8 negative) */
INLINE __m512i sign_bytes(__m512i codes) {
    return _mm512_permutex2var_epi8(load64(vb.ksigns), codes, load64(vb.ksigns + 64));
}

/* A superblock decoded: |w| 64 values a vector, their signs as masks, the int16 scale of each pair of values */
typedef struct {
    __m512i magnitude[4], scale16[4];
    uint64_t negative[4];  /* bit i of word m: value 64m + i is negative */
    float d_unit;
} vb_superblock_t;

INLINE void set_scales(int qtype, const uint8_t *blk, vb_superblock_t *sb) {
    const __m512i k = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(iq_scales(qtype, blk, &sb->d_unit)));  /* [16] */
    for (int m = 0; m < 4; m++) sb->scale16[m] = _mm512_permutexvar_epi16(load64(vb.scale16[m]), k);
}

/* IQ2_*: 32 sign bytes at bytes 8 (s / 4) + s % 4 of `bytes` -> the superblock's sign bits */
INLINE void store_signs_iq2(__m512i bytes, vb_superblock_t *sb) {
    const __m512i contiguous = _mm512_permutexvar_epi8(load64(vb.sign_bytes32), bytes);
    _mm256_storeu_si256((__m256i *)sb->negative, _mm512_castsi512_si256(contiguous));
}

INLINE void decode_iq2_xxs(const uint8_t *blk, vb_superblock_t *sb) {
    const __m512i qs = load64(((const block_iq2_xxs *)blk)->qs);  /* 8 groups: 4 index bytes, a uint32 of codes */
    /* every byte is looked up (the codes' bytes too, unread): the rows' halves at their index bytes */
    const __m512i first = lookup256(vb.iq2_xxs[0], qs), second = lookup256(vb.iq2_xxs[1], qs);
    for (int m = 0; m < 4; m++)
        sb->magnitude[m] = values(first, second, vb.pick_xxs[m], vb.shift2, vb.levels[VBMI_IQ2_XXS]);
    store_signs_iq2(sign_bytes(_mm512_multishift_epi64_epi8(load64(vb.codes_xxs), qs)), sb);
    set_scales(T_IQ2_XXS, blk, sb);
}

INLINE void decode_iq2_xs(const uint8_t *blk, vb_superblock_t *sb) {
    const __m512i qs = load64(((const block_iq2_xs *)blk)->qs);  /* 32 uint16: a 9-bit index, a 7-bit code */
    /* row r's index: byte 2r, and bit 0 of byte 2r + 1 */
    const __mmask64 ninth = _kshiftri_mask64(_mm512_test_epi8_mask(qs, _mm512_set1_epi16(0x100)), 1);
    const __m512i first = lookup512(vb.iq2_xs[0], qs, ninth), second = lookup512(vb.iq2_xs[1], qs, ninth);
    for (int m = 0; m < 4; m++)
        sb->magnitude[m] = values(first, second, vb.pick_xs[m], vb.shift2, vb.levels[VBMI_IQ2_XS]);
    store_signs_iq2(sign_bytes(_mm512_multishift_epi64_epi8(load64(vb.codes_xs), qs)), sb);
    set_scales(T_IQ2_XS, blk, sb);
}

INLINE void decode_iq2_s(const uint8_t *blk, vb_superblock_t *sb) {
    const block_iq2_s *b = (const block_iq2_s *)blk;
    const __m512i qs = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b->qs));  /* 32 indices' low bits */
    uint64_t high;  /* bits 2r, 2r + 1: the ninth and tenth bits of row r's index */
    memcpy(&high, b->qh, 8);
    const __mmask64 ninth = _pext_u64(high, 0x5555555555555555ull), tenth = _pext_u64(high, 0xAAAAAAAAAAAAAAAAull);
    const __m512i first = lookup1024(vb.iq2_s[0], qs, ninth, tenth), second = lookup1024(vb.iq2_s[1], qs, ninth, tenth);
    for (int m = 0; m < 4; m++)
        sb->magnitude[m] = values(first, second, vb.pick_s[m], vb.shift2, vb.levels[VBMI_IQ2_S]);
    memcpy(sb->negative, b->signs, 32);  /* a sign byte a row of 8: already the bits, in order */
    set_scales(T_IQ2_S, blk, sb);
}

/* IQ4_XS (not a grid type, but the same registers): 16 signed levels (IQ4_VALUES) looked up by nibble, as a
 * magnitude and a sign (the levels of nibbles 0-7 are negative), 8 scales of 6 bits less 32, one a 32 values */
INLINE void decode_iq4_xs(const uint8_t *blk, vb_superblock_t *sb) {
    const block_iq4_xs *b = (const block_iq4_xs *)blk;
    /* scale j (iq4_xs_scale): bits 16 + 4j .. of `packed` (scales_l's nibble j), then bits 2j, 2j + 1 (scales_h's) */
    const uint64_t packed = b->scales_h | (uint64_t)le32(b->scales_l) << 16;
    const __m128i fields = _mm_cvtsi64_si128((long long)packed);
    const __m128i low = _mm_and_si128(_mm_multishift_epi64_epi8(_mm_loadu_si128((const __m128i *)vb.iq4_scale_low),
                                                                 fields), _mm_set1_epi8(15));
    const __m128i high = _mm_and_si128(_mm_multishift_epi64_epi8(_mm_loadu_si128((const __m128i *)vb.iq4_scale_high),
                                                                  fields), _mm_set1_epi8(3));
    const __m128i scales = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));  /* bytes 0-7 */
    const __m512i k = _mm512_castsi128_si512(_mm_cvtepi8_epi16(scales));  /* [8] */
    for (int m = 0; m < 4; m++) {
        /* groups 2m and 2m + 1: 16 bytes each, low nibbles the first 16 values, high nibbles the rest */
        const __m256i pair = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * m));
        const __m512i bytes = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                                       _mm512_castsi256_si512(pair));
        const __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(bytes, load64(vb.nibble_shift)), _mm512_set1_epi8(15));
        sb->magnitude[m] = _mm512_permutexvar_epi8(codes, load64(vb.iq4_magnitudes));
        sb->negative[m] = _cvtmask64_u64(_mm512_testn_epi8_mask(codes, _mm512_set1_epi8(8)));
        sb->scale16[m] = _mm512_permutexvar_epi16(load64(vb.scale16_32[m]), k);
    }
    sb->d_unit = _cvtsh_ss(b->d);
}

INLINE void decode_iq3_xxs(const uint8_t *blk, vb_superblock_t *sb) {
    const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
    const __m512i qs = load64(b->qs);  /* 64 row indices */
    const __m512i first = lookup256(vb.iq3_xxs[0], qs), second = lookup256(vb.iq3_xxs[1], qs);
    for (int m = 0; m < 4; m++)
        sb->magnitude[m] = values(first, second, vb.pick_iq3[m], vb.shift3, vb.levels[VBMI_IQ3_XXS]);
    /* 8 uint32 of 4 codes each: 32 codes, in order, so the 32 sign bytes come out contiguous */
    const __m256i words = _mm256_loadu_si256((const __m256i *)b->signs_scales);
    const __m256i codes = _mm256_multishift_epi64_epi8(_mm256_load_si256((const __m256i *)vb.codes_3), words);
    _mm256_storeu_si256((__m256i *)sb->negative, _mm512_castsi512_si256(sign_bytes(_mm512_castsi256_si512(codes))));
    set_scales(T_IQ3_XXS, blk, sb);
}

INLINE void decode_iq3_s(const uint8_t *blk, vb_superblock_t *sb) {
    const block_iq3_s *b = (const block_iq3_s *)blk;
    const __m512i qs = load64(b->qs);  /* the 64 row indices' low 8 bits */
    uint64_t ninth;  /* bit r: the ninth bit of row r's index */
    memcpy(&ninth, b->qh, 8);
    const __m512i first = lookup512(vb.iq3_s[0], qs, _cvtu64_mask64(ninth));
    const __m512i second = lookup512(vb.iq3_s[1], qs, _cvtu64_mask64(ninth));
    for (int m = 0; m < 4; m++)
        sb->magnitude[m] = values(first, second, vb.pick_iq3[m], vb.shift3, vb.levels[VBMI_IQ3_S]);
    memcpy(sb->negative, b->signs, 32);  /* a sign byte each 8 values: already the bits, in order */
    set_scales(T_IQ3_S, blk, sb);
}

/* the tile's rows of x against one decoded superblock: acc[t] as the AVX-512 table's iq_row leaves it */
INLINE void dot_rows(const vb_superblock_t *sb, const acts_t *x, int64_t t0, const int nt, int64_t b, __m256 *acc) {
    for (int t = 0; t < nt; t++) {
        const int8_t *xq = x->q + (t0 + t) * x->k + b * QK_K;
        __m512i isum = _mm512_setzero_si512();
        for (int m = 0; m < 4; m++) {
            const __m512i xm = load64(xq + 64 * m);
            const __m512i signed_x = _mm512_mask_sub_epi8(xm, _cvtu64_mask64(sb->negative[m]), _mm512_setzero_si512(),
                                                          xm);
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(sb->magnitude[m], signed_x),
                                                            sb->scale16[m]));
        }
        /* lane l of the low half sums groups 0, 2, 4, 6 and of the high half 1, 3, 5, 7: their sum is iq_row's */
        const __m256i sums = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sb->d_unit * *d_at(x, t0 + t, b)), _mm256_cvtepi32_ps(sums), acc[t]);
    }
}

#define VBMI_ROW(name)                                                                                        \
    INLINE void name##_vbmi_row(const uint8_t *w, const acts_t *x, int64_t t0, const int nt, float *y,       \
                                int64_t ldy) {                                                                \
        __m256 acc[MAX_T];                                                                                    \
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                                            \
        for (int64_t b = 0; b < x->k / QK_K; b++) {                                                           \
            vb_superblock_t sb;                                                                               \
            decode_##name(w + b * (int64_t)sizeof(block_##name), &sb);                                        \
            dot_rows(&sb, x, t0, nt, b, acc);                                                                 \
        }                                                                                                     \
        store_rows(acc, nt, y, ldy);                                                                          \
    }                                                                                                         \
    ROWS(name##_vbmi)
VBMI_ROW(iq2_xxs)
VBMI_ROW(iq2_xs)
VBMI_ROW(iq2_s)
VBMI_ROW(iq3_xxs)
VBMI_ROW(iq3_s)
VBMI_ROW(iq4_xs)

/* One grid (rows of `width` values) as codes, `bits` a value, split into two bytes a row (first[r]: the first
 * half of row r's values, second[r]: the rest), and its levels (its distinct values, ascending) over 64 bytes;
 * 0 when it has more than 2^bits values (a grid these kernels cannot hold). */
static int encode_grid(const int8_t *grid, int rows, int width, int bits, uint8_t *first, uint8_t *second,
                       uint8_t *levels) {
    int8_t level[8];
    int count = 0;
    for (int v = -128; v < 128; v++) {
        int present = 0;
        for (int i = 0; i < rows * width && !present; i++) present = grid[i] == v;
        if (!present) continue;
        if (count == 1 << bits) return 0;
        level[count++] = (int8_t)v;
    }
    for (int r = 0; r < rows; r++) {
        first[r] = second[r] = 0;
        for (int i = 0; i < width; i++) {
            int at = 0;
            while (level[at] != grid[r * width + i]) at++;
            uint8_t *half = i < width / 2 ? &first[r] : &second[r];
            *half |= (uint8_t)(at << (bits * (i % (width / 2))));
        }
    }
    for (int i = 0; i < 64; i++) levels[i] = (uint8_t)level[i % (1 << bits) < count ? i % (1 << bits) : 0];
    return 1;
}

/* From strata_iq's tables (set, and only on a CPU with AVX-512 VBMI): returns bit VBMI_<type> set for each type
 * whose grid these kernels hold. */
int strata_iq_vbmi_prepare(void) {
    int ready = 0;
    ready |= encode_grid(&strata_iq.iq2_xxs[0][0], 256, 8, 2, vb.iq2_xxs[0], vb.iq2_xxs[1],
                         vb.levels[VBMI_IQ2_XXS]) << VBMI_IQ2_XXS;
    ready |= encode_grid(&strata_iq.iq2_xs[0][0], 512, 8, 2, vb.iq2_xs[0], vb.iq2_xs[1],
                         vb.levels[VBMI_IQ2_XS]) << VBMI_IQ2_XS;
    ready |= encode_grid(&strata_iq.iq2_s[0][0], 1024, 8, 2, vb.iq2_s[0], vb.iq2_s[1],
                         vb.levels[VBMI_IQ2_S]) << VBMI_IQ2_S;
    ready |= encode_grid(&strata_iq.iq3_xxs[0][0], 256, 4, 3, vb.iq3_xxs[0], vb.iq3_xxs[1],
                         vb.levels[VBMI_IQ3_XXS]) << VBMI_IQ3_XXS;
    ready |= encode_grid(&strata_iq.iq3_s[0][0], 512, 4, 3, vb.iq3_s[0], vb.iq3_s[1],
                         vb.levels[VBMI_IQ3_S]) << VBMI_IQ3_S;
    memcpy(vb.ksigns, strata_iq.ksigns, 128);
    for (int m = 0; m < 4; m++) {
        for (int i = 0; i < 32; i++) {
            vb.scale16[m][i] = (uint16_t)(4 * m + i / 8);
            vb.scale16_32[m][i] = (uint16_t)(2 * m + i / 16);
        }
        for (int j = 0; j < 64; j++) {
            const int row8 = 8 * m + j / 8, row4 = 16 * m + j / 4;  /* the row of value 64m + j (rows of 8, of 4) */
            const int second8 = j % 8 >= 4 ? 64 : 0, second4 = j % 4 >= 2 ? 64 : 0;
            vb.pick_xxs[m][j] = (uint8_t)(second8 + 8 * (row8 / 4) + row8 % 4);
            vb.pick_xs[m][j] = (uint8_t)(second8 + 2 * row8);
            vb.pick_s[m][j] = (uint8_t)(second8 + row8);
            vb.pick_iq3[m][j] = (uint8_t)(second4 + row4);
        }
    }
    for (int i = 0; i < 32; i++) vb.nibble_shift[i] = (uint16_t)(i / 8 % 2 ? 4 : 0);
    for (int j = 0; j < 16; j++) {
        vb.iq4_scale_low[j] = (uint8_t)(16 + 4 * (j % 8));
        vb.iq4_scale_high[j] = (uint8_t)(2 * (j % 8));
    }
    for (int i = 0; i < 64; i++) vb.iq4_magnitudes[i] = (uint8_t)abs(IQ4_VALUES[i % 16]);
    for (int i = 0; i < 64; i++) {
        const int j = i % 8, low = j < 4;
        vb.shift2[i] = (uint8_t)(8 * j + 2 * (j % 4));  /* quad word: a row's first half's byte 4 times, its second's */
        vb.shift3[i] = (uint8_t)(8 * j + 3 * (j % 2));  /* quad word: two rows, each first, first, second, second */
        vb.sign_bytes32[i] = (uint8_t)(i < 32 ? 8 * (i / 4) + i % 4 : 0);
        vb.codes_xxs[i] = (uint8_t)(low ? 32 + 7 * j : 0);
        vb.codes_xs[i] = (uint8_t)(low ? 16 * j + 9 : 0);
        if (i < 32) vb.codes_3[i] = (uint8_t)(low ? 7 * j : 32 + 7 * (j - 4));
    }
    return ready;
}

/* The AVX-512 table (copied into `table` by quant_matmul.c) with these kernels: the grid types' where `ready` has
 * their bit, IQ4_XS's always (it has no grid) */
void strata_qmm_table_avx512vbmi(rows_fn table[NUM_TYPES], int ready) {
    static const struct { int bit, qtype; rows_fn rows; } kernels[] = {
        {VBMI_IQ2_XXS, T_IQ2_XXS, rows_iq2_xxs_vbmi}, {VBMI_IQ2_XS, T_IQ2_XS, rows_iq2_xs_vbmi},
        {VBMI_IQ2_S, T_IQ2_S, rows_iq2_s_vbmi}, {VBMI_IQ3_XXS, T_IQ3_XXS, rows_iq3_xxs_vbmi},
        {VBMI_IQ3_S, T_IQ3_S, rows_iq3_s_vbmi}};
    for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++)
        if (ready >> kernels[i].bit & 1) table[kernels[i].qtype] = kernels[i].rows;
    table[T_IQ4_XS] = rows_iq4_xs_vbmi;
}
