"""An offloaded MoE layer's host part as one native call (kernels/native/offload_host_part.c).

Between two graphs of a replayed step, OffloadedExperts' host part lists the layer's missed pairs from the
routing the graph copied out, computes them on the CPU pool into the pinned CPU sum and counts them: a dozen numpy
and torch operations, ~20 us a layer on the 2-core development VM and ~70 us on the H200 host (session 45's
profile), on the step's critical path once per offloaded layer. Here the same work is one ctypes call whose
arguments (pointers into the exchange and the layer's host experts) were checked and packed once, with the same
bits: the pairs are listed in numpy's order and summed by the same kernel (quant_moe.c). It serves the default plan
(no PCIe staging) for GGUF experts on the native kernel; anything else keeps the Python host part, as does
STRATA_PY_HOST_PART=1 (an A/B switch, read at capture).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.stats import RoutingStats
from strata.kernels import cpu_quant
from strata.model.packed import ExpertBlocks


class NativeHostPart:
    def __init__(self, exchange, blocks: ExpertBlocks, pool: CpuExpertPool, stats: RoutingStats) -> None:
        """exchange: the runner's HostExchange (provider.py), whose buffers the arguments point into."""
        self.exchange, self.pool, self.stats = exchange, pool, stats
        if exchange.native_scratch is None:  # one for every layer: their host parts run one at a time
            exchange.native_scratch = cpu_quant.host_part_scratch(*exchange.slot_ids_np.shape, exchange.hidden.shape[1])
        self._args = cpu_quant.host_part_args(
            exchange.slot_ids_np, exchange.topk_ids_np, exchange.topk_weights_np, exchange.hidden, exchange.cpu_sum,
            blocks.w13, blocks.qtype13, blocks.w2, blocks.qtype2, blocks.inter, exchange.native_scratch)
        self._address = ctypes.addressof(self._args)
        self._totals = np.zeros(2, dtype=np.int64)  # (CPU pairs, pairs read in place) of the last call
        self._totals_address = self._totals.ctypes.data

    @staticmethod
    def runs(exchange, weights, pool: CpuExpertPool) -> bool:
        """Whether a layer's host part can be native: GGUF experts the native kernel reads, 16-bit rows."""
        return (isinstance(weights, ExpertBlocks) and exchange.hidden.dtype in (torch.bfloat16, torch.float16)
                and pool.packed_native(weights, exchange.hidden.dtype))

    def __call__(self, num_real_rows: int, num_rows: int) -> None:
        """The host part of a step of num_rows rows (graph padding included), num_real_rows of them real."""
        counts = self.stats.row_counter(num_real_rows)  # [2, R] or None when no step is counted
        cpu_quant.offload_host_part(self._address, num_rows, num_real_rows,
                                    None if counts is None else counts.ctypes.data, self._totals_address,
                                    self.pool.num_threads)
        cpu_pairs, in_place_pairs = self._totals.tolist()
        if cpu_pairs or in_place_pairs:
            self.stats.record_offloaded(cpu_pairs, in_place_pairs, 0)
