"""`--pcie-frac auto`: measure how long the CPU pool takes per missed expert and how long one expert's
weights take to cross PCIe, and split misses so both finish together. `--zero-copy-frac measure`: the same balance
between the CPU pool and the device reading experts in place from host memory."""

from __future__ import annotations

import statistics
import time

import torch

from strata.config import debug_flag
from strata.experts.cpu_pool import CpuExpertPool
from strata.kernels.sm_copy import gather_rows
from strata.model.moe import run_experts
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


def balanced_in_place_share(cpu_fixed: float, cpu_per_pair: float, in_place_per_pair: float,
                            missed_pairs: float) -> float:
    """Share f of a layer's missed pairs (missed_pairs of them a decode row) that the device reads in place so that
    its reads and the CPU pool's part end together: cpu_fixed + (1 - f) m cpu_per_pair = f m in_place_per_pair
    (seconds; the pool pays its fixed cost whenever it has pairs). Clamped to [0, 1]."""
    if missed_pairs <= 0 or in_place_per_pair <= 0:
        return 0.0
    cpu_fixed, cpu_per_pair = max(cpu_fixed, 0.0), max(cpu_per_pair, 0.0)
    share = (cpu_fixed + missed_pairs * cpu_per_pair) / (missed_pairs * (cpu_per_pair + in_place_per_pair))
    return min(max(share, 0.0), 1.0)


def measure_in_place_share(experts: list[ExpertBlocks], pool: CpuExpertPool, device: str, missed_pairs: float,
                           repeats: int = 5) -> float:
    """`--zero-copy-frac measure`: the balanced_in_place_share of these host experts (ExpertBlocks of the offloaded
    layers, pinned host memory) for one decode row: the CPU pool timed on one pair and on round(missed_pairs) pairs,
    the device's pairs kernel on the same number read in place (CUDA events), median of `repeats`, each repeat on
    other experts of another layer (cold, as at decode)."""
    num, cuda = max(1, round(missed_pairs)), torch.device(device).type == "cuda"
    hidden_size = experts[0].w2.shape[1]
    hidden = torch.randn(1, hidden_size, dtype=torch.bfloat16)
    on_device = hidden.to(device)
    weights = torch.full((1, num), 1.0 / num, dtype=torch.float32)

    def ids_of(rep: int) -> torch.Tensor:  # [num] distinct experts, other ones each repeat
        count = experts[0].w13.shape[0]
        return (torch.arange(num) + rep * num) % count

    def cpu_time(blocks: ExpertBlocks, ids: torch.Tensor) -> float:
        started = time.perf_counter()
        pool.compute(hidden, torch.zeros(len(ids), dtype=torch.long), ids, weights[0, :len(ids)], blocks)
        return time.perf_counter() - started

    sm_stage = debug_flag("SM_STAGE")  # the device's pairs staged by its SMs first (ExpertSlots.stage_by_sm)
    rows = {}  # (w13's, w2's row shapes) -> device rows for num experts (layers of a file may differ)
    for blocks in experts if sm_stage else ():
        key = (blocks.w13.shape[1:], blocks.w2.shape[1:])
        rows.setdefault(key, [torch.empty((num, *w.shape[1:]), dtype=w.dtype, device=device)
                              for w in (blocks.w13, blocks.w2)])

    def device_pairs(blocks: ExpertBlocks, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> None:
        if sm_stage:
            rows13, rows2 = rows[(blocks.w13.shape[1:], blocks.w2.shape[1:])]
            gather_rows(rows13, blocks.w13, topk_ids[0])
            gather_rows(rows2, blocks.w2, topk_ids[0])
            blocks, topk_ids = blocks._replace(w13=rows13, w2=rows2), torch.arange(num, device=device)[None, :]
        run_experts(on_device, blocks, topk_ids, topk_weights)

    def in_place_time(blocks: ExpertBlocks, ids: torch.Tensor) -> float:
        topk_ids, topk_weights = ids[None, :].to(device), weights.to(device)
        if not cuda:  # (the tests' CPU "device": the same calls, timed on the host)
            started = time.perf_counter()
            device_pairs(blocks, topk_ids, topk_weights)
            return time.perf_counter() - started
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        device_pairs(blocks, topk_ids, topk_weights)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    warm = experts[0]
    cpu_time(warm, ids_of(0)[:1]), in_place_time(warm, ids_of(0))  # first calls: the kernels' set-up
    one, many, device_reads = [], [], []
    for rep in range(repeats):
        blocks = experts[rep % len(experts)]
        one.append(cpu_time(blocks, ids_of(3 * rep + 1)[:1]))
        many.append(cpu_time(blocks, ids_of(3 * rep + 2)))
        device_reads.append(in_place_time(blocks, ids_of(3 * rep + 3)))
    t_one, t_many = statistics.median(one), statistics.median(many)
    per_pair = (t_many - t_one) / (num - 1) if num > 1 else t_one
    return balanced_in_place_share(t_one - per_pair, per_pair, statistics.median(device_reads) / num, missed_pairs)
