import time, torch, sys
from strata.kernels import cpu_attention, cpu_quant
B = 16
L = 8000
nb = -(-L // B) + 1
pools = [(torch.randn(nb, B, 3, 64), torch.randn(nb, B, 3, 64)) for _ in range(30)]
import os
table = (torch.arange(nb) if os.environ.get("SEQ") else torch.randperm(nb))[None].long()
seq = torch.tensor([L]); starts = torch.tensor([0, 1])
for kvh_sel, heads in ((3, 9),):
    q = torch.randn(1, heads, 64)
    for th in (1, 2):
        cpu_quant.set_num_threads(th)
        f = lambda kc, vc: cpu_attention.paged_attention(q, kc, vc, table, seq, starts, 0.125)
        for warm in (False, True):
            best = 1e9
            for r in range(5):
                t = time.perf_counter()
                if warm:
                    for _ in range(30): f(*pools[0])
                else:
                    for kc, vc in pools: f(kc, vc)
                best = min(best, (time.perf_counter() - t) / 30)
            print(f"threads {th} {'warm' if warm else 'cold'}: {best*1e6:.0f} us a layer, {2*L*3*64*4/best/1e9:.1f} GB/s")
# plain streaming read bandwidth for reference
x = torch.randn(100_000_000)
for th in (1, 2):
    torch.set_num_threads(th)
    t = time.perf_counter(); 
    for _ in range(3): x.sum()
    print(f"torch sum {th} threads: {3*4e8/(time.perf_counter()-t)/1e9:.1f} GB/s")
