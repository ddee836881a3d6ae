"""quant_moe (30B-A3B layer: Q4_K gate/up, Q6_K down; 6 pairs of one token from 128 experts, 4 layers' worth, cold),
AVX2 table against AVX-512 table, 1 and 2 threads, alternated rounds; medians of the calls."""
import time, torch, numpy as np
from strata.kernels import cpu_quant
E, D, I, layers = 128, 2048, 768, 4
def rnd(shape, sb, dpos):
    b = torch.randint(0, 256, shape, dtype=torch.uint8)
    v = b.view(*shape[:-1], -1, sb)
    for p in dpos: v[..., p] = 0x10
    return b
w13 = [rnd((E, 2 * I, D // 256 * 144), 144, (1, 3)) for _ in range(layers)]
w2 = [rnd((E, D, I // 256 * 210), 210, (209,)) for _ in range(layers)]
per_expert = w13[0][0].numel() + w2[0][0].numel()
hidden = torch.randn(4, D); out = torch.zeros(4, D)
rng = np.random.default_rng(0)
for threads in (1, 2):
    for tokens, npairs in ((1, 6), (4, 24)):
        res = {}
        for r in range(3):
            for isa in ("avx2", "avx512"):
                cpu_quant.set_isa(isa)
                times = []
                for it in range(40):
                    L = it % layers
                    ex = np.concatenate([rng.choice(E, npairs // tokens, replace=False) for _ in range(tokens)]).astype(np.int64)
                    rows = np.repeat(np.arange(tokens), npairs // tokens).astype(np.int64)
                    wts = np.full(npairs, 0.1, np.float32)
                    t = time.perf_counter()
                    cpu_quant.quant_moe(hidden, rows, ex, wts, w13[L], 12, w2[L], 14, I, out, num_threads=threads)
                    times.append(time.perf_counter() - t)
                res.setdefault(isa, []).append(np.median(times[8:]) * 1e6)
        print(f"threads {threads} tokens {tokens} pairs {npairs}: " + "  ".join(f"{k} " + "/".join(f"{v:.0f}" for v in vs) + " us" for k, vs in res.items()))
