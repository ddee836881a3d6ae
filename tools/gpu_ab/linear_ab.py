"""skinny_linear against cuBLAS (F.linear) for one-row bf16 GEMVs of the hybrid shapes, inside CUDA graphs, weights rotated."""
import torch, torch.nn.functional as F
from strata.kernels.skinny_linear import skinny_linear
def graph_time(fn, copies, reps=5):
    fn(0); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph(); s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(0); torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for i in range(copies * 4): fn(i % copies)
    torch.cuda.synchronize(); g.replay(); torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(reps): g.replay()
    ev[1].record(); torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1]) * 1e3 / (reps * copies * 4)
for name, n, k in [("next_qkvz", 12288, 2048), ("next_ba", 64, 2048), ("next_out", 2048, 4096), ("shared_gu", 1024, 2048),
                   ("shared_down", 2048, 512), ("shared_gate", 1, 2048), ("attn_qkv", 9216, 2048), ("attn_o", 2048, 4096),
                   ("q4e_qkvz", 12288, 2560), ("q4e_out", 2560, 4096)]:
    copies = max(2, min(32, int(1.0e9 // (n * k * 2))))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    res = {}
    for arm, fn in (("cublas", lambda i: F.linear(x, ws[i])), ("skinny", lambda i: skinny_linear(x, ws[i])),
                    ("skinny_n4", lambda i: skinny_linear(x, ws[i], config=dict(BLOCK_N=4, BLOCK_K=1024, num_warps=4, num_stages=4))),
                    ("skinny_n8k512", lambda i: skinny_linear(x, ws[i], config=dict(BLOCK_N=8, BLOCK_K=512, num_warps=4, num_stages=4)))):
        t = graph_time(fn, copies); res[arm] = (round(t, 2), round(n * k * 2 / t / 1e3))
    print(name, n, k, res, flush=True)
    del ws
