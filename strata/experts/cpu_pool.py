"""The CPU expert pool: worker threads computing the experts a step needs that hold no device slot,
from the host copy of their weights.

CPU weights stay in the dtype the model runs in (bfloat16 on GPU runs, float32 in the CPU tests): not
upcast, not re-quantized. Device slots are then plain copies of host rows (a swap is one DMA), the CPU
and device paths agree up to summation order, and 16-bit halves both host RAM and the bytes each CPU
expert reads, which is what bounds CPU expert speed (oneDNN runs bf16 GEMMs natively on AVX512-BF16 /
AMX hosts). A quantized CPU form (int8, Q4) would be faster but changes the numerics; not done yet.

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
from strata.model.moe import expert_mlp


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

    def compute(self, hidden: torch.Tensor, rows: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor,
                w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        """hidden [M, D] (host), per pair: rows [P] (row of hidden), experts [P], weights [P];
        w13 [E, 2I, D], w2 [E, D, I] host weights of one layer -> weighted expert sums [M, D] in float32
        (summed in float32 like the fused kernel, rounded once by the caller)."""
        if self._use_native(w13, w2):
            out = torch.zeros(hidden.shape, dtype=torch.float32)
            self.native.accumulate(hidden.to(w13.dtype), rows.numpy(), experts.numpy(), weights.float().numpy(),
                                   w13, w2, out)
            return out
        return self._torch_compute(hidden, rows, experts, weights, w13, w2)

    def accumulate(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                   w13: torch.Tensor, w2: torch.Tensor, out: torch.Tensor) -> None:
        """out [R, D] float32 += the weighted expert outputs of the pairs; rows [P] index hidden [R, D]
        and out directly (rows without pairs are left alone)."""
        if self._use_native(w13, w2):
            self.native.accumulate(hidden.to(w13.dtype), rows, experts, weights, w13, w2, out)
            return
        used_rows, inverse = torch.from_numpy(np.asarray(rows, dtype=np.int64)).unique(return_inverse=True)
        y = self._torch_compute(hidden[used_rows], inverse, torch.from_numpy(np.asarray(experts, dtype=np.int64)),
                                torch.from_numpy(np.asarray(weights)).to(w13.dtype), w13, w2)
        out.index_add_(0, used_rows, y)

    def _use_native(self, w13: torch.Tensor, w2: torch.Tensor) -> bool:
        return self.native is not None and cpu_kernel.supports(w13) and cpu_kernel.supports(w2)

    def _torch_compute(self, hidden: torch.Tensor, rows: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor,
                       w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        """compute() on the worker threads: one task per distinct expert, merged in expert order."""
        order = experts.argsort(stable=True)                                   # [P] pairs grouped by expert
        used, counts = torch.unique_consecutive(experts[order], return_counts=True)
        groups = order.split(counts.tolist())
        futures = [self.executor.submit(_weighted_expert, hidden, rows[g], weights[g], w13[e], w2[e])
                   for e, g in zip(used.tolist(), groups)]
        out = torch.zeros_like(hidden, dtype=torch.float32)
        for g, future in zip(groups, futures):
            out.index_add_(0, rows[g], future.result())
        return out

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def _weighted_expert(hidden: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor, w13: torch.Tensor,
                     w2: torch.Tensor) -> torch.Tensor:
    """[n, D] float32: one expert over its rows, scaled by each pair's routing weight."""
    return expert_mlp(hidden[rows], w13, w2).float() * weights.float().unsqueeze(1)
