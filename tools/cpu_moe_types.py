"""quant_moe (the CPU expert pool's kernel) on one thread, per GGUF type, on the Qwen3-30B-A3B's expert shape
(2,048 x 768): us a pair from memory (one row, 48 experts in turn, ~2.6 MB each at Q4_K: past the caches) and
from the caches (one and eight rows of one expert); best of the repeats. Random blocks (32-value types get
finite scales, MXFP4 normal ones); the arithmetic, not the values, sets the time.
With THREADS, also "stepN": one call of an offloaded decode row's 6 pairs (6 of the 48 experts, from memory) on
THREADS threads, us a call.
usage: cpu_moe_types.py TYPE[,TYPE...] [ISA [THREADS]]   (ISA: one of cpu_quant.available_isas(), the best unless
named or "best"; run from the tree to measure: PYTHONPATH=<tree>)"""
import sys
import time

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from strata.kernels import cpu_quant

D, I, E = 2048, 768, 48


def weights(qtype, rng) -> tuple[torch.Tensor, torch.Tensor]:
    values, block_bytes = GGML_QUANT_SIZES[qtype]
    w13 = torch.from_numpy(rng.integers(0, 256, (E, 2 * I, D // values * block_bytes), dtype=np.uint8))
    w2 = torch.from_numpy(rng.integers(0, 256, (E, D, I // values * block_bytes), dtype=np.uint8))
    if values == 32 and qtype == GGMLQuantizationType.MXFP4:  # its exponent byte: scales 2^-13 .. 2^-4, normal
        for w in (w13, w2):
            blocks = w.view(E, w.shape[1], -1, block_bytes)
            blocks[..., 0] = torch.from_numpy(rng.integers(115, 125, tuple(blocks[..., 0].shape), dtype=np.uint8))
    elif values == 32:  # each block's float16 scale: a random low byte, 0x20 high (finite, ~1e-3..4e-3)
        for w in (w13, w2):
            blocks = w.view(E, w.shape[1], -1, block_bytes)
            blocks[..., 0] = torch.from_numpy(rng.integers(0, 256, tuple(blocks[..., 0].shape), dtype=np.uint8))
            blocks[..., 1] = 0x20
    return w13, w2


def per_pair_us(qtype, w13, w2, rows: int, experts, repeats: int) -> float:
    x, out = torch.randn(rows, D), torch.zeros(rows, D)
    row_ids, routing = np.arange(rows, dtype=np.int64), np.ones(rows, np.float32)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for e in experts:
            cpu_quant.quant_moe(x, row_ids, np.full(rows, e, np.int64), routing, w13, int(qtype), w2, int(qtype), I,
                                out, num_threads=1)
        best = min(best, (time.perf_counter() - started) / len(experts))
    return best * 1e6


def step_us(qtype, w13, w2, threads: int, repeats: int = 20) -> float:
    """One row's 6 pairs in one call (6 experts of the 48 in turn: from memory), us a call."""
    x, out = torch.randn(1, D), torch.zeros(1, D)
    row_ids, routing = np.zeros(6, dtype=np.int64), np.full(6, 1 / 6, np.float32)
    best = float("inf")
    for r in range(repeats):
        experts = (np.arange(6, dtype=np.int64) + 6 * r) % E
        started = time.perf_counter()
        cpu_quant.quant_moe(x, row_ids, experts, routing, w13, int(qtype), w2, int(qtype), I, out, num_threads=threads)
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    if len(sys.argv) > 2 and sys.argv[2] != "best":
        cpu_quant.set_isa(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    line = [cpu_quant.isa()]
    for name in sys.argv[1].split(","):
        qtype = GGMLQuantizationType[name]
        w13, w2 = weights(qtype, rng)
        line.append(f"{name} memory {per_pair_us(qtype, w13, w2, 1, range(E), 3):.0f} "
                    f"cached1 {per_pair_us(qtype, w13, w2, 1, [0], 30):.0f} "
                    f"cached8 {per_pair_us(qtype, w13, w2, 8, [0], 15):.0f}"
                    + (f" step{threads} {step_us(qtype, w13, w2, threads):.0f}" if threads else ""))
    print(" | ".join(line))


if __name__ == "__main__":
    main()
