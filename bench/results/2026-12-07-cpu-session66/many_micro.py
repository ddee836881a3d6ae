"""dequant_matmul at prompt sizes on SmolLM2's Q4_1 projection shapes: GMAC/s, hot weights, 2 threads."""
import sys, time, torch
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
cpu_quant.set_num_threads(int(__import__("os").environ.get("TH", 2)))
if len(sys.argv) > 1: cpu_quant.set_isa(sys.argv[1])
print("isa", cpu_quant.isa())
T = int(__import__("os").environ.get("T", 512))
for n, k in ((1536, 576), (576, 1536), (960, 576)):
    w = torch.randint(0, 255, (n, k // 32 * 20), dtype=torch.uint8)
    w.view(-1, 20)[:, :2] = torch.tensor([0x00, 0x20], dtype=torch.uint8)  # small f16 d
    w.view(-1, 20)[:, 2:4] = torch.tensor([0x00, 0x20], dtype=torch.uint8)
    x = torch.randn(T, k)
    best = 1e9
    for i in range(25):
        t = time.perf_counter(); cpu_quant.dequant_matmul(x, w, Q.Q4_1, n, k); best = min(best, time.perf_counter() - t)
    print(f"{n}x{k} T={T}: {best*1e3:.2f} ms {T*n*k/best/1e9:.1f} GMAC/s")
