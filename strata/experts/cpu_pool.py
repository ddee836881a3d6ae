"""The CPU expert pool: worker threads computing the experts a step needs that hold no device slot,
from the host copy of their weights.

CPU weights stay in the dtype the model runs in (bfloat16 on GPU runs, float32 in the CPU tests): not
upcast, not re-quantized. Device slots are then plain copies of host rows (a swap is one DMA), the CPU
and device paths agree up to summation order, and 16-bit halves both host RAM and the bytes each CPU
expert reads, which is what bounds CPU expert speed (oneDNN runs bf16 GEMMs natively on AVX512-BF16 /
AMX hosts). Experts from a GGUF file stay in its blocks (ExpertBlocks, packed bytes in host RAM): a
16-bit model computes them with cpu_quant.quant_moe, a float32 one dequantizes each used expert (exact).

Two ways to compute, picked by `kernel`:
- native (cpu_kernel.py / cpu_moe.c, the default where a C compiler builds it): one call per layer,
  every thread on every expert's rows, vectorised bf16/float32 dot products; what makes CPU experts
  run at a useful share of host memory bandwidth;
- torch: each distinct expert is one task of a worker thread (one intra-op thread each); results are
  merged in expert order on the calling thread.
Either way each distinct expert is read once per call and the sum does not depend on thread timing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from strata.experts import cpu_kernel
from strata.kernels import cpu_quant
from strata.kernels.gguf_blocks import dequantize_ref
from strata.model.moe import expert_mlp
from strata.model.registry import ExpertBlocks


# how long the packed kernel's idle workers poll between an offloaded model's layers (poll_between_layers)
OFFLOAD_SPIN_US = 5000


class CpuExpertPool:
    def __init__(self, num_threads: int = 0, kernel: str = "auto") -> None:
        self.num_threads = num_threads or torch.get_num_threads()
        library = cpu_kernel.load() if kernel != "torch" else None
        if kernel == "native" and library is None:
            raise RuntimeError("cpu_expert_kernel='native' but the native CPU expert kernel could not be built "
                               "(see the log); use 'auto' or 'torch'")
        self.native = cpu_kernel.NativeExperts(library, self.num_threads) if library is not None else None
        self.kernel = "native" if self.native is not None else "torch"
        self._executor: ThreadPoolExecutor | None = None  # the torch path's workers, started at first use

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            # one intra-op thread per worker: the pool parallelises across experts, and nested OpenMP teams
            # (workers x torch threads) oversubscribe the cores and spin against the device-feeding thread
            self._executor = ThreadPoolExecutor(self.num_threads, thread_name_prefix="strata-cpu-experts",
                                                initializer=torch.set_num_threads, initargs=(1,))
        return self._executor

    def poll_between_layers(self, qtypes: tuple[int, int]) -> None:
        """An offloaded model on a GPU: its layers' CPU experts (GGUF blocks of `qtypes`) run every few hundred
        microseconds of a decode step, and the packed kernel's workers poll that long between them
        (OFFLOAD_SPIN_US) rather than sleep after 200 us: waking 15 of them cost more than the kernel's work
        on the H200 host (session 40)."""
        if self.kernel == "native" and cpu_quant.supports_moe(*qtypes):
            cpu_quant.set_spin_us(OFFLOAD_SPIN_US)

    def compute(self, hidden: torch.Tensor, rows: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor,
                expert_weights: tuple[torch.Tensor, torch.Tensor] | ExpertBlocks) -> torch.Tensor:
        """hidden [M, D] (host), per pair: rows [P] (row of hidden), experts [P], weights [P]; one layer's host
        weights (w13 [E, 2I, D], w2 [E, D, I]) or ExpertBlocks -> weighted expert sums [M, D] in float32
        (summed in float32 like the fused kernel, rounded once by the caller)."""
        out = torch.zeros(hidden.shape, dtype=torch.float32)
        self.accumulate(hidden, rows.numpy(), experts.numpy(), weights.float().numpy(), expert_weights, out)
        return out

    def accumulate(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                   expert_weights: tuple[torch.Tensor, torch.Tensor] | ExpertBlocks, out: torch.Tensor) -> None:
        """out [R, D] float32 += the weighted expert outputs of the pairs; rows [P] index hidden [R, D]
        and out directly (rows without pairs are left alone)."""
        if isinstance(expert_weights, ExpertBlocks):
            self._accumulate_packed(hidden, rows, experts, weights, expert_weights, out)
            return
        w13, w2 = expert_weights
        if self.native is not None and cpu_kernel.supports(w13) and cpu_kernel.supports(w2):
            self.native.accumulate(hidden.to(w13.dtype), rows, experts, weights, w13, w2, out)
            return
        self._torch_accumulate(hidden, rows, experts, weights, lambda e: (w13[e], w2[e]), w13.dtype, out)

    def packed_native(self, blocks: ExpertBlocks, dtype: torch.dtype) -> bool:
        """Whether GGUF experts `blocks` of a model in `dtype` run on the native kernel (16-bit models; a float32
        one takes the exact dequantizing path)."""
        return self.kernel == "native" and dtype != torch.float32 and cpu_quant.supports_moe(blocks.qtype13,
                                                                                             blocks.qtype2)

    def _accumulate_packed(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                           blocks: ExpertBlocks, out: torch.Tensor) -> None:
        """Experts as GGUF blocks. 16-bit models: the native kernel (cpu_quant.quant_moe: activations
        rounded to int8 per block, as for every packed matmul of a 16-bit CPU model). float32 models, and
        where the kernel is not built: each used expert dequantized to float32 and the torch path, exactly
        the same file loaded dense."""
        if self.packed_native(blocks, hidden.dtype):
            cpu_quant.quant_moe(hidden.float().contiguous(), np.ascontiguousarray(rows, dtype=np.int64),
                                np.ascontiguousarray(experts, dtype=np.int64),
                                np.ascontiguousarray(weights, dtype=np.float32), blocks.w13, blocks.qtype13, blocks.w2,
                                blocks.qtype2, blocks.inter, out, num_threads=self.num_threads)
            return
        dim, inter = blocks.hidden_size, blocks.inter

        def weights_of(e: int) -> tuple[torch.Tensor, torch.Tensor]:
            return (dequantize_ref(blocks.w13[e], blocks.qtype13, dim), dequantize_ref(blocks.w2[e], blocks.qtype2, inter))

        self._torch_accumulate(hidden.float(), rows, experts, weights, weights_of, torch.float32, out)

    def _torch_accumulate(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                          weights_of, dtype: torch.dtype, out: torch.Tensor) -> None:
        """accumulate() on the worker threads: one task per distinct expert (its weights from
        weights_of(e), in `dtype`), merged in expert order."""
        rows = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        experts = torch.from_numpy(np.asarray(experts, dtype=np.int64))
        weights = torch.from_numpy(np.asarray(weights, dtype=np.float32)).to(dtype)
        used_rows, inverse = rows.unique(return_inverse=True)
        hidden = hidden[used_rows].to(dtype)                                   # [M, D]
        order = experts.argsort(stable=True)                                   # [P] pairs grouped by expert
        used, counts = torch.unique_consecutive(experts[order], return_counts=True)
        groups = order.split(counts.tolist())
        futures = [self.executor.submit(_weighted_expert, hidden, inverse[g], weights[g], weights_of, e)
                   for e, g in zip(used.tolist(), groups)]
        y = torch.zeros(hidden.shape, dtype=torch.float32)
        for g, future in zip(groups, futures):
            y.index_add_(0, inverse[g], future.result())
        out.index_add_(0, used_rows, y)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _weighted_expert(hidden: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor, weights_of, expert: int) -> torch.Tensor:
    """[n, D] float32: one expert over its rows, scaled by each pair's routing weight."""
    w13, w2 = weights_of(expert)
    return expert_mlp(hidden[rows], w13, w2).float() * weights.float().unsqueeze(1)
