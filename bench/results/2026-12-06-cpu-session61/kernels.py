"""Session 61, the CPU kernels alone on the 2-core VM: the Gated DeltaNet recurrence (Qwen3-Next's 32 value heads
of 128 x 128) through the torch path the model took before (gather, mask, recurrent rule, scatter) against
cpu_gdn.recurrent, at 1 / 4 / 8 sequences of one token; one 32- / 128- / 512-token prompt through the chunked torch
form against cpu_gdn.recurrent; and a 512 x 2,048 float32 router through cpu_linear.row_linear against one
F.linear a row (ops.row_wise_linear before) and torch's GEMM (not row-invariant); greedy argmax over [4, 151,936]
logits, torch's against strata.kernels.argmax (numpy's on the CPU). torch at one thread, as the engine
keeps it on this 2-core VM ("torch CPU threads: 1"); the native kernels on their pool of 2. Usage: python kernels.py"""
import time

import torch
import torch.nn.functional as F

from strata.kernels import cpu_gdn, cpu_linear
from strata.kernels.argmax import argmax
from strata.model.gated_delta_net import chunked_gated_delta_rule, recurrent_gated_delta_rule

torch.manual_seed(0)
torch.set_num_threads(1)
H, D = 32, 128


def timed(fn, n=20):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e3


def inputs(tokens):
    q = F.normalize(torch.randn(tokens, H, D), dim=-1)
    k = F.normalize(torch.randn(tokens, H, D), dim=-1)
    return q, k, torch.randn(tokens, H, D), -torch.rand(tokens, H) * 0.1, torch.rand(tokens, H)


for seqs in (1, 4, 8):
    pool = torch.randn(8, H, D, D) * 0.01
    q, k, v, g, beta = inputs(seqs)
    slots, has = torch.arange(seqs), torch.ones(seqs, dtype=torch.bool)
    out = torch.empty(seqs, H, D)

    def torch_path():
        initial = torch.where(has[:, None, None, None], pool[slots], 0)
        _, final = recurrent_gated_delta_rule(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], initial)
        pool.index_copy_(0, slots, final)

    def native():
        cpu_gdn.recurrent((q * D ** -0.5).contiguous(), k, v, g.exp(), beta, pool, slots, slots, slots + 1,
                          has.long(), out)
    print(f"GDN decode, {seqs} sequence(s): torch {timed(torch_path):.2f} ms, native {timed(native):.2f} ms a layer")

for tokens in (32, 128, 512):
    pool = torch.randn(2, H, D, D) * 0.01
    q, k, v, g, beta = inputs(tokens)
    out = torch.empty(tokens, H, D)
    one = torch.tensor([0])
    native = lambda: cpu_gdn.recurrent((q * D ** -0.5).contiguous(), k, v, g.exp(), beta, pool, one, one,  # noqa: E731
                                       torch.tensor([tokens]), torch.tensor([1]), out)
    chunked = lambda: chunked_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], pool[1:2])  # noqa: E731
    print(f"GDN prompt of {tokens}: chunked torch {timed(chunked, 3):.2f} ms, native {timed(native, 3):.2f} ms a layer")

w = torch.randn(512, 2048) / 45
for rows in (1, 4, 16, 256):
    x = torch.randn(rows, 2048)
    print(f"router 512 x 2048, {rows} row(s): row_linear {timed(lambda: cpu_linear.row_linear(x, w)) * 1e3:.0f} us, "
          f"F.linear a row {timed(lambda: torch.cat([F.linear(r, w) for r in x.split(1)])) * 1e3:.0f} us, "
          f"GEMM {timed(lambda: F.linear(x, w)) * 1e3:.0f} us")

logits = torch.randn(4, 151936)
print(f"argmax [4, 151936]: torch {timed(lambda: logits.argmax(-1), 50) * 1e3:.0f} us, "
      f"strata {timed(lambda: argmax(logits), 50) * 1e3:.0f} us")
