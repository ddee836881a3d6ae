"""An offloaded layer's host part on this host: the Python one (OffloadedExperts._host_part, native=None) against the
native call (strata/experts/native_host_part.py), one decode row of the 30B-A3B's shape (128 experts, Q4_K gate/up,
Q6_K down, 2048 x 768), 6 of 8 pairs missed (2 resident), the pool's threads as given; rounds alternated.
usage: .venv/bin/python bench/results/2026-12-05-cpu-session47/host_part_native.py [threads] [rounds]"""
import statistics, sys, time
import numpy as np, torch
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.provider import HostExchange, OffloadedExperts
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
E, D, I, K = 128, 2048, 768, 8
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
rng = np.random.default_rng(0)
w13 = torch.from_numpy(rng.integers(0, 256, (E, 2 * I, D // 256 * 144), dtype=np.uint8))
w2 = torch.from_numpy(rng.integers(0, 256, (E, D, I // 256 * 210), dtype=np.uint8))
for w, offsets, rb in ((w13, (0, 2), 144), (w2, (208,), 210)):  # small finite float16 scales
    blocks = w.view(-1, rb)
    for o in offsets:
        blocks[:, o:o + 2] = torch.from_numpy(rng.uniform(-0.01, 0.01, (blocks.shape[0], 1)).astype(np.float16).view(np.uint8))
slots = ExpertSlots([w13], [w2], 32, 8, "cpu", qtypes=[(12, 14)])
stats = RoutingStats(1, E, "cpu")
p = OffloadedExperts(0, slots, CpuExpertPool(threads), stats, pcie_frac=0.0)
p.exchange = ex = HostExchange(32, K, D, torch.bfloat16, "cpu")
ex.topk_ids_np[0] = [3, 17, 40, 77, 90, 101, 5, 64]; ex.slot_ids_np[0] = [-1, -1, 2, -1, -1, -1, 7, -1]
ex.topk_weights_np[0] = 0.1
ex.hidden[0] = torch.randn(D)
native = p._native_host_part(ex)
class NoWait:
    def synchronize(self): pass
ev, n = NoWait(), 200
times = {"python": [], "native": []}
for r in range(rounds):
    for arm, part in (("python", None), ("native", native)):
        for _ in range(20): p._host_part(1, 1, ev, part)
        stats.begin_rows(1)
        t = time.perf_counter()
        for _ in range(n): p._host_part(1, 1, ev, part)
        times[arm].append((time.perf_counter() - t) / n * 1e6)
        stats.take_rows()
for arm, ts in times.items():
    print(f"{arm}: host part {statistics.median(ts):.1f} us (rounds: {', '.join(f'{t:.1f}' for t in ts)}), {threads} threads")
