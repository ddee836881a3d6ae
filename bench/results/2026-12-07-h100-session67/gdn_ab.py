"""The Gated DeltaNet recurrence kernel alone on Qwen3-Next's heads (16 key, 32 value heads of 128), raw gates as the
layer passes them: `python3 gdn_ab.py` from a tree prints us a launch (CUDA graph of 20 launches, median of 5) for
decode rows, verification windows and prompts, so two trees' kernels compare by running it from each. `sweep`
(an argument) also times each case at Dv tiles of 8-32 and 1-8 warps (the recurrence's two reductions a token stay
within a warp where its K axis does)."""
import statistics
import sys

import torch

from strata.kernels.gdn import RawGates, gdn_recurrent

HK, HV, DK, DV = 16, 32, 128, 128
CASES = {"decode 4 x 1": [1] * 4, "verify 4 x 4": [4] * 4, "verify 16 x 4": [4] * 16, "prompt 64": [64],
         "prompt 64 + 3 x 4": [4, 4, 4, 64], "prompt 256": [256]}


def case(lens, **tiling):
    torch.manual_seed(0)
    t = sum(lens)
    q, k = (torch.randn(t, HK, DK, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(t, HV, DV, device="cuda", dtype=torch.bfloat16)
    a, b = (torch.randn(t, HV, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    raw = RawGates(torch.randn(HV, device="cuda") * 0.5, torch.randn(HV, device="cuda") * 0.5, HV, 0)
    pool = torch.randn(len(lens) + 2, HV, DK, DV, device="cuda") * 0.1
    slots = torch.arange(len(lens), device="cuda")
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    init = torch.ones(len(lens), dtype=torch.bool, device="cuda")
    keep = max(lens) <= 16

    def launch():
        gdn_recurrent(q, k, v, a, b, pool, slots, qsl, init, keep_all_states=keep, raw=raw, **tiling)

    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            launch()
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / 20)
    return statistics.median(times)


for name, lens in CASES.items():
    print(f"{name:>20}: {case(lens):8.1f} us")
    if "sweep" in sys.argv[1:] and name in ("verify 4 x 4", "prompt 64"):
        print("   ", "  ".join(f"bv{bv}/w{w} {case(lens, block_v=bv, num_warps=w):.1f}"
                              for bv in (8, 16, 32) for w in (1, 2, 4, 8)), flush=True)
