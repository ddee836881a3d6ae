"""route_and_align for one token (and 4, 8) against a 512- and 128-expert router: num_warps x k_splits, in CUDA graphs."""
import torch
from graph_timing import graph_time
from strata.kernels.routing import route_and_align
for experts, dim, top_k in [(512, 2048, 10), (512, 2560, 10), (128, 2048, 8)]:
    w = torch.randn(experts, dim, device="cuda", dtype=torch.bfloat16) / dim ** 0.5
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    for t in (1, 4, 8):
        h = torch.randn(t, dim, device="cuda", dtype=torch.bfloat16)
        res = {}
        for warps in (None, 1, 2, 4, 8):
            for ks in (None, 1, 2, 4, 8):
                try:
                    res[(warps, ks)] = round(graph_time(lambda i: route_and_align(h, w, top_k, True, 16, counter, num_warps=warps, k_splits=ks)), 2)
                except Exception as e:  # noqa: BLE001
                    res[(warps, ks)] = str(e)[:60]
        best = min((v, k) for k, v in res.items() if isinstance(v, float))
        print(experts, dim, top_k, "T", t, "default", res.get((None, None)), "best", best, res, flush=True)
