import time, torch, sys
sys.path.insert(0, "tests/kernels")
from test_cpu_attention import _case
from strata.kernels import cpu_attention
q, k, v, tables, lens, starts = _case([900] * 8, [1] * 8, heads=9, kv_heads=3, dim=64, block=16)
best = 1e9
for rep in range(20):
    t = time.perf_counter()
    for _ in range(10): cpu_attention.paged_attention(q, k, v, tables, lens, starts, 0.125, context_tokens=1)
    best = min(best, (time.perf_counter() - t) / 10)
print(f"one thread, best of 20 x 10: {best * 1e6:.0f} us")
