"""An offloaded layer's host part (OffloadedExperts._host_part) on this host with the CPU kernel stubbed out (stub) or
run (real), for one decode row of the 30B-A3B's shape (Q4_K / Q6_K experts, 6 of 8 pairs missed), --pcie-frac 0 and
0.5 (staging copies stubbed: there is no GPU here): the host part's own Python. us a call.
usage: .venv/bin/python bench/results/2026-12-04-cpu-session41/host_part.py stub|real"""
import time, numpy as np, torch
from strata.experts import provider as pv
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
E, D, I, K = 128, 2048, 768, 8
w13 = [torch.zeros(E, 2 * I, D // 256 * 144, dtype=torch.uint8) for _ in range(2)]
w2 = [torch.zeros(E, D, I // 256 * 210, dtype=torch.uint8) for _ in range(2)]
slots = ExpertSlots(w13, w2, 32, 8, "cpu", qtypes=[(12, 14)] * 2)
stats = RoutingStats(2, E, "cpu")
class Ex:  # HostExchange's numpy side, unpinned
    def __init__(self, n=32):
        self.topk_ids = torch.zeros(n, K, dtype=torch.long); self.topk_weights = torch.zeros(n, K)
        self.slot_ids = torch.zeros(n, K, dtype=torch.long); self.hidden = torch.zeros(n, D, dtype=torch.bfloat16)
        self.cpu_sum = torch.zeros(n, D); self.staged_ids = torch.full((n, K), -1, dtype=torch.long)
        self.topk_ids_np, self.topk_weights_np = self.topk_ids.numpy(), self.topk_weights.numpy()
        self.slot_ids_np, self.cpu_sum_np, self.staged_ids_np = self.slot_ids.numpy(), self.cpu_sum.numpy(), self.staged_ids.numpy()
class Ev:
    def synchronize(self): pass
import sys
mode = sys.argv[1]
for pcie in (0.0, 0.5):
    p = pv.OffloadedExperts(1, slots, CpuExpertPool(1), stats, pcie_frac=pcie)
    p.exchange = ex = Ex()
    ex.topk_ids_np[0] = [3, 17, 40, 77, 90, 101, 5, 64]; ex.slot_ids_np[0] = [-1, -1, 2, -1, -1, -1, 7, -1]
    ex.topk_weights_np[0] = 0.1
    if mode == "stub":
        p._add_cpu_pairs = lambda *a: None
    slots.stage = lambda layer, experts: list(range(32, 32 + len(experts)))
    n = 3000 if mode == "stub" else 300
    ev = Ev()
    for _ in range(50): p._host_part(1, 32, ev)
    t = time.perf_counter()
    for _ in range(n): p._host_part(1, 32, ev)
    print(f"{mode} pcie {pcie}: host part {(time.perf_counter() - t) / n * 1e6:.1f} us")
