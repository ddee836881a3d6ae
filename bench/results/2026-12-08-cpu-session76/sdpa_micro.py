"""SmolLM2's heads (9 query / 3 KV, 64 dims): torch's CPU SDPA on one and two threads, a causal chunk and a chunk
after a cached prefix, masked (the old path) against model/cpu_sdpa.attend_after_prefix; ms a call, best of 3."""
import time
import torch
import torch.nn.functional as F
from strata.model import cpu_sdpa

cpu_sdpa.set_large_op_threads(0)  # the thread count below holds for every call
for threads in (1, 2):
    torch.set_num_threads(threads)
    for n, c in ((2048, 0), (2048, 2048), (512, 3584), (128, 4000)):
        q, k, v = torch.randn(1, 9, n, 64), torch.randn(1, 3, n + c, 64), torch.randn(1, 3, n + c, 64)
        arms = {"causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)} if not c \
            else {"masked": lambda: F.scaled_dot_product_attention(
                      q, k, v, attn_mask=torch.arange(n + c)[None, :] <= (c + torch.arange(n))[:, None], enable_gqa=True),
                  "split": lambda: cpu_sdpa.attend_after_prefix(q, k, v, c, 0.125)}
        times = {}
        for _ in range(3):
            for name, f in arms.items():
                t = time.perf_counter(); f(); times.setdefault(name, []).append(time.perf_counter() - t)
        print(f"threads {threads} chunk {n} after {c}: " + "  ".join(f"{a} {min(v) * 1e3:.1f} ms" for a, v in times.items()))
