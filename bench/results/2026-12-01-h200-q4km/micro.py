"""Kernel timings at the 30B-A3B shape: packed MoE (pairs, dequantized) vs bf16 fused MoE; packed_gemv vs bf16."""
import sys, time, torch, numpy as np
sys.path.insert(0, "tests")
from triton.testing import do_bench
from gguf_writer import random_blocks
import gguf
from strata.kernels.packed_moe import packed_moe, _pairs, _grouped, _dequantized
from strata.kernels.fused_moe import fused_moe
from strata.kernels.packed_gemv import packed_gemv
from strata.kernels.packed_dequant import dequantize
Q = gguf.GGMLQuantizationType
E, D, I, K = 128, 2048, 768, 8
rng = np.random.default_rng(0)
w13 = torch.from_numpy(random_blocks((E, 2 * I, D), Q.Q4_K, rng, 1e-2)).cuda()
w2 = torch.from_numpy(random_blocks((E, D, I), Q.Q6_K, rng, 1e-2)).cuda()
d13 = dequantize(w13.view(E * 2 * I, -1), Q.Q4_K, D, torch.bfloat16).view(E, 2 * I, D)
d2 = dequantize(w2.view(E * D, -1), Q.Q6_K, I, torch.bfloat16).view(E, D, I)
print(f"packed expert bytes {(w13[0].numel() + w2[0].numel())/2**20:.2f} MiB, bf16 {(d13[0].numel()+d2[0].numel())*2/2**20:.2f} MiB")
for T in (1, 8, 16, 64, 512):
    h = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)])
    w = torch.rand(T, K, device="cuda", dtype=torch.bfloat16)
    t_bf = do_bench(lambda: fused_moe(h, d13, d2, ids, w), warmup=10, rep=50)
    t_pairs = do_bench(lambda: _pairs(h, w13, Q.Q4_K, w2, Q.Q6_K, ids, w), warmup=10, rep=50) if T <= 16 else float("nan")
    t_grp = do_bench(lambda: _grouped(h, w13, Q.Q4_K, w2, Q.Q6_K, ids, w), warmup=10, rep=50)
    t_deq = do_bench(lambda: _dequantized(h, w13, Q.Q4_K, w2, Q.Q6_K, ids, w, False), warmup=5, rep=30)
    print(f"T={T:4d} fused bf16 {t_bf*1e3:8.1f} us  pairs {t_pairs*1e3:8.1f} us  grouped {t_grp*1e3:8.1f} us  "
          f"dequantized {t_deq*1e3:8.1f} us", flush=True)
t = do_bench(lambda: dequantize(w13.view(E * 2 * I, -1), Q.Q4_K, D, torch.bfloat16), warmup=5, rep=30)
print(f"dequantize one layer's w13 ({w13.numel()/2**20:.0f} MiB -> {E*2*I*D*2/2**20:.0f} MiB): {t*1e3:.1f} us")
for n, k, q in ((5120, 2048, Q.Q4_K), (2048, 4096, Q.Q4_K), (151936, 2048, Q.Q6_K)):
    wb = torch.from_numpy(random_blocks((n, k), q, rng, 1e-2)).cuda()
    dense = dequantize(wb, q, k, torch.bfloat16)
    for rows in (1, 2, 16):
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        tp = do_bench(lambda: packed_gemv(x, wb, q, n, k), warmup=10, rep=50)
        td = do_bench(lambda: torch.nn.functional.linear(x, dense), warmup=10, rep=50)
        print(f"linear {n}x{k} {q.name} rows={rows}: packed_gemv {tp*1e3:7.1f} us  bf16 {td*1e3:7.1f} us")
