"""Can the GPU read offloaded experts straight from pinned host memory? One token's pairs of the 30B-A3B's experts
(Q4_K gate/up of 2,048, Q6_K down of 768; 128 experts, ~390 MB, each iteration other ones: beyond L2) through
packed_q8's pairs kernel with the weights (a) in device memory, (b) in pinned host memory, read over PCIe by the
kernel itself (zero copy), and (c) the same experts' bytes copied by the copy engine (strata/dma.py, two
cudaMemcpyAsync an expert), (d) then run from the copies (session 41's staging path), (e) copied by the SMs' own
loads from the device's list of experts (kernels/sm_copy.gather_rows: no host work, graph-capturable), (f) then run. CUDA-event times, median of
40, us and GB/s of expert bytes. If (b) is near (c) + (d), a third expert tier (read over PCIe by the step's own
kernels, beside the CPU pool, no host staging work) is worth building. usage: zero_copy_ab.py [pairs=1,3,6]"""
import statistics
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from strata import dma
from strata.kernels import packed_q8
from strata.kernels.sm_copy import gather_rows
from strata.weights.quantize import quantize

opts = dict(a.split("=") for a in sys.argv[1:])
D, I, E, TOP_K = 2048, 768, 128, 8
rng = np.random.default_rng(0)


def blocks(qtype, n, k):
    """E experts' [n, k] weights as GGUF blocks, 4 quantized from Gaussian values repeated in distinct memory."""
    distinct = torch.stack([quantize(torch.randn(n, k) * 0.02, qtype) for _ in range(4)])
    return distinct.repeat((E + 3) // 4, 1, 1)[:E].contiguous()


host13, host2 = blocks(Q.Q4_K, 2 * I, D).pin_memory(), blocks(Q.Q6_K, D, I).pin_memory()
dev13, dev2 = host13.cuda(), host2.cuda()
slots13, slots2 = torch.empty_like(dev13[:8]), torch.empty_like(dev2[:8])
per_expert = host13[0].numel() + host2[0].numel()
hidden = (torch.randn(1, D) * 0.5).bfloat16().cuda()
weights = torch.full((1, TOP_K), 0.1, device="cuda")
library = dma.runtime()
assert library is not None, "no CUDA runtime library mapped in this process (strata/dma.py)"
stream = torch.cuda.current_stream().cuda_stream


def ids_for(experts):
    ids = torch.full((1, TOP_K), -1, dtype=torch.long)
    ids[0, :len(experts)] = torch.as_tensor(experts)
    return ids.cuda()


def copy_in(experts):
    for slot, e in enumerate(experts):
        dma.copy_to_device(library, slots13[slot].data_ptr(), host13[e].data_ptr(), host13[e].numel(), stream)
        dma.copy_to_device(library, slots2[slot].data_ptr(), host2[e].data_ptr(), host2[e].numel(), stream)


def sm_stage(chosen):
    """The experts of chosen [8] (on the device; -1: none) into the staging slots by gather_rows."""
    gather_rows(slots13, host13, chosen)
    gather_rows(slots2, host2, chosen)


def arms(experts):
    ids, local = ids_for(experts), ids_for(list(range(len(experts))))
    chosen = torch.full((slots13.shape[0],), -1, dtype=torch.long)
    chosen[:len(experts)] = torch.as_tensor(experts)
    chosen = chosen.cuda()
    return {
        "device": lambda: packed_q8.moe_pairs_q8(hidden, dev13, int(Q.Q4_K), dev2, int(Q.Q6_K), ids, weights),
        "zero copy": lambda: packed_q8.moe_pairs_q8(hidden, host13, int(Q.Q4_K), host2, int(Q.Q6_K), ids, weights),
        "dma": lambda: copy_in(experts),
        "dma + run": lambda: (copy_in(experts), packed_q8.moe_pairs_q8(hidden, slots13, int(Q.Q4_K), slots2,
                                                                      int(Q.Q6_K), local, weights))[1],
        "sm stage": lambda: sm_stage(chosen),
        "sm stage + run": lambda: (sm_stage(chosen), packed_q8.moe_pairs_q8(hidden, slots13, int(Q.Q4_K), slots2,
                                                                            int(Q.Q6_K), local, weights))[1],
    }


for pairs in [int(p) for p in opts.get("pairs", "1,3,6").split(",")]:
    experts = list(rng.choice(E, pairs, replace=False))
    got = {name: fn() for name, fn in arms(experts).items() if name not in ("dma", "sm stage")}
    same = all(torch.equal(got["device"], out) for out in got.values())
    times = {name: [] for name in arms(experts)}
    for _ in range(45):
        experts = list(rng.choice(E, pairs, replace=False))
        for name, fn in arms(experts).items():  # (each arm's host work is in its time: see the device arm's floor)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    medians = {name: statistics.median(t[5:]) for name, t in times.items()}
    line = ", ".join(f"{name} {us:.0f} us ({pairs * per_expert / us / 1e3:.1f} GB/s)" for name, us in medians.items())
    print(f"{pairs} pairs ({pairs * per_expert / 1e6:.1f} MB): {line}; outputs equal: {same}", flush=True)


def timed(fn, reps=25):
    """Median CUDA-event time of fn() in us over reps calls (other experts each time), after 5 warm-up calls."""
    times = []
    for i in range(reps + 5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times[5:])


for tiling in [t for t in opts.get("sweep", "").split("/") if t]:
    bn, sb, warps, stages = (int(v) for v in tiling.split(":"))
    config = dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=stages)
    for pairs in (3, 6):
        picks = [ids_for(list(rng.choice(E, pairs, replace=False))) for _ in range(30)]
        us = timed(lambda i: packed_q8.moe_pairs_q8(hidden, host13, int(Q.Q4_K), host2, int(Q.Q6_K), picks[i], weights,
                                                    config))
        print(f"sweep {tiling}: {pairs} pairs zero copy {us:.0f} us ({pairs * per_expert / us / 1e3:.1f} GB/s)",
              flush=True)
