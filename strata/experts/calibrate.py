"""`--pcie-frac auto`: measure how long the CPU pool takes per missed expert and how long one expert's
weights take to cross PCIe, and split misses so both finish together."""

from __future__ import annotations

import time

import torch

from strata.experts.cpu_pool import CpuExpertPool
from strata.model.registry import ExpertBlocks


def balanced_pcie_share(cpu_seconds_per_expert: float, num_threads: int, pcie_seconds_per_expert: float) -> float:
    """Share f of missed experts to copy over PCIe so that the copies (one after another) and the CPU
    pool (num_threads experts at a time) take equally long: (1 - f) * t_cpu / threads = f * t_pcie."""
    cpu = cpu_seconds_per_expert / max(num_threads, 1)
    if cpu <= 0 or pcie_seconds_per_expert <= 0:
        return 0.0
    return cpu / (cpu + pcie_seconds_per_expert)


def measure_pcie_share(host_w13: torch.Tensor, host_w2: torch.Tensor, pool: CpuExpertPool, device: str,
                       qtypes: tuple[int, int] | None = None, repeats: int = 5) -> float:
    """host_w13 [E, 2I, D], host_w2 [E, D, I] of one layer (host memory), or their GGUF blocks of types
    `qtypes`. 0.0 without a CUDA device."""
    if torch.device(device).type != "cuda":
        return 0.0
    num = min(repeats, host_w13.shape[0])
    if qtypes is None:
        weights, hidden_size, dtype = (host_w13, host_w2), host_w13.shape[2], host_w13.dtype
    else:  # packed experts run with a 16-bit model on CUDA
        weights, hidden_size, dtype = ExpertBlocks(host_w13, qtypes[0], host_w2, qtypes[1]), host_w2.shape[1], torch.bfloat16
    hidden = torch.randn(1, hidden_size, dtype=dtype)
    rows, route = torch.zeros(num, dtype=torch.long), torch.ones(num, dtype=dtype)
    pool.compute(hidden, rows[:1], torch.zeros(1, dtype=torch.long), route[:1], weights)  # warm-up
    started = time.perf_counter()
    pool.compute(hidden, rows, torch.arange(num), route, weights)  # num experts on the pool
    cpu = (time.perf_counter() - started) * min(pool.num_threads, num) / num
    staging = (torch.empty_like(host_w13[0], device=device), torch.empty_like(host_w2[0], device=device))
    torch.cuda.synchronize()
    started = time.perf_counter()
    for e in range(num):
        staging[0].copy_(host_w13[e], non_blocking=True)
        staging[1].copy_(host_w2[e], non_blocking=True)
    torch.cuda.synchronize()
    pcie = (time.perf_counter() - started) / num
    return balanced_pcie_share(cpu, pool.num_threads, pcie)
