"""One-row products of 32-value block types (Qwen4-Exp Q4_K_M's down rows: 2560 x 640 as Q8_0 / Q5_0; IQ4_NL, the
i-quant files' fallback; Q4_0 / Q4_1) and its Q4_K gate rows, AVX2 table against AVX-512, one thread, quantized
Gaussian weights; COUNT distinct copies (1: warm in L2; 64: cold). Best of 3 alternated rounds of 64 calls."""
import os, time, torch
from gguf import GGMLQuantizationType as Q
from strata.kernels import cpu_quant
from strata.weights.quantize import quantize
cpu_quant.set_num_threads(1)
count = int(os.environ.get("COUNT", 1))
for qtype, n, k in ((Q.Q8_0, 2560, 640), (Q.Q5_0, 2560, 640), (Q.Q4_0, 2560, 640), (Q.Q5_1, 2560, 640),
                    (Q.Q4_K, 1280, 2560)):
    if qtype == Q.IQ4_NL:
        import gguf.quants as gq
        base = torch.from_numpy(gq.quantize((torch.randn(n, k) * 0.02).numpy(), qtype))
    else:
        base = quantize(torch.randn(n, k) * 0.02, qtype)
    w = base.unsqueeze(0).repeat(count, 1, 1).contiguous()
    for rows in (1, 4):
        x = torch.randn(rows, k)
        res = {}
        for r in range(3):
            for isa in os.environ.get("ISAS", "avx2,avx512").split(","):
                cpu_quant.set_isa(isa)
                t = time.perf_counter()
                for e in range(64): cpu_quant.quant_matmul(x, w[e % count], int(qtype), n, k)
                res.setdefault(isa, []).append((time.perf_counter() - t) / 64 * 1e6)
        print(f"{qtype.name} {n}x{k} rows {rows}: " + "  ".join(f"{i} {min(v):.0f} us ({w[0].numel()/min(v)/1e3:.1f} GB/s)" for i, v in res.items()), flush=True)
