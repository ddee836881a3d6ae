/* This CPU's ceilings for the two ways to multiply quantized weights, one thread, timed by its CPU time:
 * 10 independent 256-bit FMAs a loop (float32 activations: dequant_matmul), and 4 vpmaddubsw + 4 vpmaddwd
 * (int8 activations as llama.cpp / quant_matmul use: one pair = 32 multiply-adds).
 * build: cc -O2 -o peak peak.c */
#include <stdio.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    long n = 200000000;
    double t = cpu_seconds();
    __asm__ volatile(
        "vxorps %%ymm0,%%ymm0,%%ymm0\n vxorps %%ymm1,%%ymm1,%%ymm1\n vxorps %%ymm2,%%ymm2,%%ymm2\n"
        "vxorps %%ymm3,%%ymm3,%%ymm3\n vxorps %%ymm4,%%ymm4,%%ymm4\n vxorps %%ymm5,%%ymm5,%%ymm5\n"
        "vxorps %%ymm6,%%ymm6,%%ymm6\n vxorps %%ymm7,%%ymm7,%%ymm7\n vxorps %%ymm8,%%ymm8,%%ymm8\n"
        "vxorps %%ymm9,%%ymm9,%%ymm9\n"
        "1:\n vfmadd231ps %%ymm10,%%ymm11,%%ymm0\n vfmadd231ps %%ymm10,%%ymm11,%%ymm1\n"
        "vfmadd231ps %%ymm10,%%ymm11,%%ymm2\n vfmadd231ps %%ymm10,%%ymm11,%%ymm3\n"
        "vfmadd231ps %%ymm10,%%ymm11,%%ymm4\n vfmadd231ps %%ymm10,%%ymm11,%%ymm5\n"
        "vfmadd231ps %%ymm10,%%ymm11,%%ymm6\n vfmadd231ps %%ymm10,%%ymm11,%%ymm7\n"
        "vfmadd231ps %%ymm10,%%ymm11,%%ymm8\n vfmadd231ps %%ymm10,%%ymm11,%%ymm9\n dec %0\n jnz 1b\n"
        : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9");
    t = cpu_seconds() - t;
    printf("256-bit FMA: %.2f /ns = %.1f GMAC/s float32\n", 2e9 / t / 1e9, 2e9 * 8 / t / 1e9);
    n = 200000000;
    t = cpu_seconds();
    __asm__ volatile(
        "1:\n vpmaddubsw %%ymm10,%%ymm11,%%ymm0\n vpmaddubsw %%ymm10,%%ymm11,%%ymm1\n"
        "vpmaddubsw %%ymm10,%%ymm11,%%ymm2\n vpmaddubsw %%ymm10,%%ymm11,%%ymm3\n"
        "vpmaddwd %%ymm10,%%ymm11,%%ymm4\n vpmaddwd %%ymm10,%%ymm11,%%ymm5\n"
        "vpmaddwd %%ymm10,%%ymm11,%%ymm6\n vpmaddwd %%ymm10,%%ymm11,%%ymm7\n dec %0\n jnz 1b\n"
        : "+r"(n)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7");
    t = cpu_seconds() - t;
    printf("vpmaddubsw + vpmaddwd: %.2f pairs/ns = %.1f GMAC/s int8\n", 0.8e9 / t / 1e9, 0.8e9 * 32 / t / 1e9);
    return 0;
}
