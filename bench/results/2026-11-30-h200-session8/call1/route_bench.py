"""Device-only: route_and_align (num_warps 2/4/8) against router linear + softmax_topk + moe_align, each
timed as 50 back-to-back calls inside one CUDA graph (device time per call, launch gaps included)."""
import os
import torch
import torch.nn.functional as F
from strata.kernels.routing import route_and_align, softmax_topk
from strata.kernels.moe_align import moe_align


def per_call(fn, reps=50):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay(); torch.cuda.synchronize()
    a, b = torch.cuda.Event(True), torch.cuda.Event(True)
    a.record()
    for _ in range(10):
        g.replay()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / 10 / reps


for E, D, K in ((128, 2048, 8), (512, 2048, 10)):
    w = torch.randn(E, D, device="cuda", dtype=torch.bfloat16) / D ** 0.5
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    for T in (1, 8, 16, 64):
        h = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
        three = per_call(lambda: moe_align(softmax_topk(F.linear(h, w), K, True, h.dtype)[0], E, 16))
        row = [f"E={E} T={T}: three launches {three:5.2f} us"]
        for arm, env in (("old", "STRATA_OLD_ROUTE_TAIL"), ("new", ""), ("preload", "STRATA_ROUTE_PRELOAD")):
            os.environ.pop("STRATA_OLD_ROUTE_TAIL", None); os.environ.pop("STRATA_ROUTE_PRELOAD", None)
            if env: os.environ[env] = "1"
            for nw in (4, 8):
                row.append(f"{arm} nw={nw} {per_call(lambda: route_and_align(h, w, K, True, 16, counter, num_warps=nw)):5.2f}")
            os.environ.pop("STRATA_OLD_ROUTE_TAIL", None); os.environ.pop("STRATA_ROUTE_PRELOAD", None)
        print(", ".join(row), flush=True)
