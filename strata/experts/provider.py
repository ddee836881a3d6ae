"""The expert provider of a MoE layer when the device holds only some experts (replaces LocalExperts).

Per call: pairs whose expert holds a slot run on the slot weights (fused kernel with slot ids on CUDA
in 16-bit, the torch grouped path otherwise); up to `pcie_frac` of the distinct missed experts (the
most used first) are copied into staging slots and run there (a launch of their own); so is every missed
expert with at least `prompt_stream_min_pairs` pairs this step (a prompt chunk's: the copy runs beside the CPU,
which then computes fewer pairs; 6 by default, measured against 4, 5 and 32 in session 50), in rounds of as many experts as there are staging slots. The rest go
to the CPU pool, which works while the device computes. With `zero_copy_frac`, pairs of the zero-copy experts
(ExpertSlots.set_zero_copy) in steps of up to IN_PLACE_MAX_ROWS rows are computed by the device from the host
copy itself, read over PCIe by the same kernels, beside the CPU and with no host work. Outputs are summed per
token. A layer whose experts are all resident takes the slot path alone, with no host sync; any other layer syncs
with the host.

Inside a CUDA graph capture a layer that is not all resident splits the graph once (strata/split_graphs.py):
the captured part copies the routing and the rows to pinned host buffers (HostExchange), records the layer's
event (a node of the graph: `external`), and runs the slot pairs; the host part waits for that event only, so
the CPU computes the missed pairs while the device computes the slot pairs, and writes their sum to a pinned
buffer, which the next graph copies in (a node of that graph) and adds. With PCIe staging the host part first
queues the copies of the plan's experts to the staging slots and writes their pairs' slots to another pinned
buffer; the next graph copies that in too and runs those pairs (as the eager path's staged round, summed in the
same order: `expert_total`). Pairs read in place run in the captured part after the slot pairs, and the host part
sees them marked IN_PLACE. Without staging, GGUF experts' host part is one native call (native_host_part.py). A
layer with no expert on the device skips the slot part. One graph launch a layer: each costs the host tens of
microseconds on the step's critical path, unless (STRATA_LAUNCH_AHEAD=1, an A/B switch, within noise on an H100 in
session 47) the graph after the host part is launched before it and waits on a flag in pinned memory that the host
part raises once the CPU sum is written (split_graphs' gated splits; not with PCIe staging).
"""

from __future__ import annotations

import collections

import numpy as np
import torch
from torch import nn

from strata.config import debug_flag
from strata.experts.cpu_pool import CpuExpertPool
from strata.experts.native_host_part import NativeHostPart
from strata.experts.slots import ExpertSlots
from strata.experts.stats import RoutingStats
from strata.kernels.host_flag import HostFlag
from strata.kernels.sm_copy import copy_words, export_rows
from strata.model.moe import run_experts
from strata.split_graphs import capturing, split_here


# a pair's slot as the host parts see it: -1 missed (the CPU's or the staging slots'), IN_PLACE read by the device
# in place from host memory (ExpertSlots.set_zero_copy); graphs do that only for steps of up to IN_PLACE_MAX_ROWS
NOT_RESIDENT, IN_PLACE = -1, -2
IN_PLACE_MAX_ROWS = 4


class HostExchange:
    """Buffers a split graph's MoE layers share (one layer uses them at a time): routing and rows
    copied out by the graph, the CPU sum copied back in. `by_sm`: those copies are kernels (kernels/sm_copy.py),
    not copy-engine transfers, which queue behind the KV staging ring's large copies (runner/kv_staging.py), and the
    four copies out one launch; STRATA_COPY_EXCHANGE=1 (an A/B switch, read at capture) makes them copy nodes."""

    def __init__(self, max_tokens: int, top_k: int, hidden_size: int, dtype: torch.dtype, device: str,
                 by_sm: bool = False) -> None:
        pinned = {"pin_memory": torch.device(device).type == "cuda"}  # (unpinned on a CPU device: the tests')
        self.max_tokens, self._by_sm = max_tokens, by_sm
        self.topk_ids = torch.zeros(max_tokens, top_k, dtype=torch.long, **pinned)          # [N, K]
        self.topk_weights = torch.zeros(max_tokens, top_k, dtype=torch.float32, **pinned)   # [N, K]
        self.slot_ids = torch.zeros(max_tokens, top_k, dtype=torch.long, **pinned)          # [N, K]
        self.hidden = torch.zeros(max_tokens, hidden_size, dtype=dtype, **pinned)           # [N, D]
        self.cpu_sum = torch.zeros(max_tokens, hidden_size, dtype=torch.float32, **pinned)  # [N, D]
        self.cpu_sum_device = torch.zeros(max_tokens, hidden_size, dtype=torch.float32, device=device)
        self.staged_ids = torch.full((max_tokens, top_k), -1, dtype=torch.long, **pinned)    # [N, K] staging slots
        self.staged_ids_device = torch.full((max_tokens, top_k), -1, dtype=torch.long, device=device)
        # numpy views of the same memory: the host part runs once per offloaded layer per step
        self.topk_ids_np, self.topk_weights_np = self.topk_ids.numpy(), self.topk_weights.numpy()
        self.slot_ids_np, self.cpu_sum_np = self.slot_ids.numpy(), self.cpu_sum.numpy()
        self.staged_ids_np = self.staged_ids.numpy()
        self.native_scratch: tuple | None = None  # the native host parts' scratch (native_host_part.py), shared

    @property
    def by_sm(self) -> bool:
        """Whether the graphs captured now copy by kernels (pinned buffers and Triton only)."""
        return self._by_sm and not debug_flag("COPY_EXCHANGE")

    def fetch_sum(self, num_rows: int) -> torch.Tensor:
        """The first `num_rows` rows of the CPU sum on the device [T, D] float32: a copy captured into the graph
        after the host part, which reads the pinned buffer as the host part left it."""
        self._transfer(self.cpu_sum_device[:num_rows], self.cpu_sum[:num_rows])
        return self.cpu_sum_device[:num_rows]

    def fetch_staged(self, num_rows: int) -> torch.Tensor:
        """[T, K] the staging slot of each pair the host part staged, -1 for the others, on the device (as fetch_sum)."""
        self._transfer(self.staged_ids_device[:num_rows], self.staged_ids[:num_rows])
        return self.staged_ids_device[:num_rows]

    def export(self, topk_ids: torch.Tensor, topk_weights: torch.Tensor, slot_ids: torch.Tensor,
               hidden: torch.Tensor) -> None:
        """Queue the copies of a layer's routing [T, K] and rows [T, D] into the host buffers (captured): by the SMs,
        one kernel (sm_copy.export_rows), else four copies."""
        num_rows = hidden.shape[0]
        if self.by_sm:  # (rows of unit stride along their last dim: a copy first otherwise)
            export_rows((self.topk_ids[:num_rows], self.topk_weights[:num_rows], self.slot_ids[:num_rows],
                         self.hidden[:num_rows]),
                        tuple(t if t.stride(-1) == 1 else t.contiguous() for t in (topk_ids, topk_weights, slot_ids,
                                                                                  hidden)))
            return
        self._transfer(self.topk_ids[:num_rows], topk_ids)
        self._transfer(self.topk_weights[:num_rows], topk_weights)
        self._transfer(self.slot_ids[:num_rows], slot_ids)
        self._transfer(self.hidden[:num_rows], hidden)

    def _transfer(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        if self.by_sm:  # (the device routing's dtypes may differ from the buffers')
            copy_words(dst, src.to(dst.dtype).contiguous())
        else:
            dst.copy_(src, non_blocking=True)


class OffloadedExperts(nn.Module):
    def __init__(self, layer_idx: int, slots: ExpertSlots, pool: CpuExpertPool, stats: RoutingStats,
                 pcie_frac: float, prompt_stream_min_pairs: int = 0) -> None:
        super().__init__()
        self.layer_idx, self.slots, self.pool, self.stats = layer_idx, slots, pool, stats
        self.pcie_frac, self.prompt_stream_min_pairs = pcie_frac, prompt_stream_min_pairs
        self.exchange: HostExchange | None = None  # set when the runner captures split graphs
        self._copied: torch.cuda.Event | None = None  # recorded in the captured graphs after the exports
        self._flag: HostFlag | None = None  # what the graph after the host part waits on (STRATA_LAUNCH_AHEAD)
        self._native: tuple | None = None  # (exchange, its NativeHostPart or None), made at the first capture

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """hidden [T, D], topk_ids / topk_weights [T, K] -> [T, D]."""
        slots = self.slots
        slot_ids = slots.remap[self.layer_idx][topk_ids]  # [T, K] slot of each pair, -1 = not resident
        self.stats.record_resident(slot_ids >= 0)
        device_weights = slots.layer_weights(self.layer_idx)
        if slots.is_layer_resident(self.layer_idx):
            return run_experts(hidden, device_weights, slot_ids, topk_weights)
        in_place_ids = self._in_place_ids(topk_ids, slot_ids)  # [T, K] or None
        if capturing():
            return self._forward_split(hidden, topk_ids, topk_weights, slot_ids, in_place_ids)
        elsewhere = slot_ids < 0 if in_place_ids is None else (slot_ids < 0) & (in_place_ids < 0)
        # everything the host reads, read before the device's parts are queued, in one wait: a copy to the host
        # waits for all that is queued before it, so read after them it would hold the CPU's pairs back until the
        # device's were done (as it did for offloaded prompts until session 75)
        reads = (elsewhere, topk_ids, topk_weights, hidden) + (() if in_place_ids is None else (in_place_ids >= 0,))
        elsewhere_host, ids_host, weights_host, hidden_host, *in_place_host = (t.to("cpu", non_blocking=True)
                                                                              for t in reads)
        if hidden.is_cuda:
            torch.cuda.current_stream(hidden.device).synchronize()
        rows, ks = elsewhere_host.nonzero().unbind(1)      # [M] each: the pairs for the CPU or staging
        in_place_rows = in_place_host[0].nonzero()[:, 0].numpy() if in_place_host else np.zeros(0, dtype=np.int64)
        experts, pair_weights = ids_host[rows, ks], weights_host[rows, ks]             # [M] each
        # then the device's parts, which run while the CPU computes its pairs
        out = run_experts(hidden, device_weights, slot_ids, topk_weights) if slots.visible_per_layer[self.layer_idx] \
            else None
        in_place = self._read_in_place(hidden, in_place_ids, topk_weights)
        chosen, staged = (torch.from_numpy(a) for a in self._staging_plan(experts.numpy(), len(hidden)))
        # chosen [C]: experts to copy; staged [M]: each pair's index into chosen, -1 = CPU
        on_cpu = staged < 0
        weights_cpu = pair_weights[on_cpu].float()                                     # [P]
        rounds = []  # the staged experts, a launch per round of staging slots (a prompt chunk's may need several)
        for start in range(0, len(chosen), max(slots.num_staging, 1)):  # (no staging slots: nothing chosen)
            in_round = (staged >= start) & (staged < start + slots.num_staging)
            round_ids = self._stage(slot_ids, rows[in_round], ks[in_round], chosen[start:start + slots.num_staging],
                                    staged[in_round] - start)
            rounds.append(run_experts(hidden, device_weights, round_ids, topk_weights))
        bytes_copied = len(chosen) * slots.expert_bytes(self.layer_idx)
        num_cpu = int(on_cpu.sum())
        self.stats.record_rows(rows[on_cpu].numpy(), np.concatenate([rows[~on_cpu].numpy(), in_place_rows]))
        cpu_sum = None
        if num_cpu:
            # [T, D] on the host, pinned: sent without a wait, so the next layer queues while the device's part runs
            cpu_sum = torch.zeros(hidden.shape, dtype=torch.float32, pin_memory=hidden.is_cuda)
            self._add_cpu_pairs(hidden_host, rows[on_cpu].numpy(), experts[on_cpu].numpy(), weights_cpu.numpy(),
                                cpu_sum)
            cpu_sum = cpu_sum.to(hidden.device, non_blocking=True)
        if len(experts) or len(in_place_rows):
            self.stats.record_offloaded(num_cpu, len(experts) - num_cpu + len(in_place_rows), bytes_copied)
        return expert_total(out, cpu_sum, in_place + rounds, hidden.dtype)

    def _in_place_ids(self, topk_ids: torch.Tensor, slot_ids: torch.Tensor) -> torch.Tensor | None:
        """[T, K] the expert of each pair that the device reads in place from host memory (a zero-copy expert
        without a slot, ExpertSlots.set_zero_copy), -1 for the others; None when this layer has no such expert or
        the step more than IN_PLACE_MAX_ROWS rows (the pairs kernel reads an expert once a pair: a longer step's
        pairs of them go to the CPU, which reads each expert once)."""
        if not self.slots.zero_copy_per_layer[self.layer_idx] or topk_ids.shape[0] > IN_PLACE_MAX_ROWS:
            return None
        return torch.where(slot_ids >= 0, -1, self.slots.zero_copy_ids[self.layer_idx][topk_ids])

    def _read_in_place(self, hidden: torch.Tensor, in_place_ids: torch.Tensor | None,
                       topk_weights: torch.Tensor) -> list[torch.Tensor]:
        """[the pairs of in_place_ids computed by the device from the host copy of the experts ([T, D])], or []."""
        if in_place_ids is None:
            return []
        if debug_flag("SM_STAGE"):  # an A/B switch: the SMs copy the experts to device rows first (slots.stage_by_sm)
            weights, rows = self.slots.stage_by_sm(self.layer_idx, in_place_ids,
                                                   IN_PLACE_MAX_ROWS * in_place_ids.shape[1])
            return [run_experts(hidden, weights, rows, topk_weights)]
        return [run_experts(hidden, self.slots.host_weights(self.layer_idx), in_place_ids, topk_weights)]

    def _forward_split(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                       slot_ids: torch.Tensor, in_place_ids: torch.Tensor | None) -> torch.Tensor:
        """Captured part: routing and rows out to the host, slot pairs (and those read in place from host memory) on
        the device; the host part (a split of the graph) computes the missed pairs on the CPU and, with PCIe staging,
        copies some of their experts to the staging slots; the graph after it adds the CPU sum and runs the staged
        pairs. hidden [T, D] -> [T, D]."""
        exchange = self.exchange
        if exchange is None:
            raise RuntimeError("offloaded experts inside a CUDA graph need the runner's HostExchange")
        num_rows = hidden.shape[0]
        weights = self.slots.layer_weights(self.layer_idx)
        # the host sees the pairs read in place as IN_PLACE, not as missed ones
        exchange.export(topk_ids, topk_weights, slot_ids if in_place_ids is None else
                        torch.where(in_place_ids >= 0, IN_PLACE, slot_ids), hidden)
        out = copied = flag = None
        on_device = self.slots.visible_per_layer[self.layer_idx]  # else no slot pair (graph_plan tracks it)
        # STRATA_LAUNCH_AHEAD=1 (an A/B switch, read at capture): the next graph is launched before the host part
        # and waits on a flag the host part raises (split_graphs); not with staging, whose copies the host part
        # queues on the stream
        gated = debug_flag("LAUNCH_AHEAD") and not self.stages_in_graphs
        if on_device or in_place_ids is not None or gated:
            if self._copied is None:  # a node of the graphs it is captured in; the host waits for its last launch
                self._copied = torch.cuda.Event(external=True)
            copied = self._copied
            copied.record()
        if gated:
            if self._flag is None:
                self._flag = HostFlag()
            flag = self._flag
        if on_device:
            out = run_experts(hidden, weights, slot_ids, topk_weights)
        in_place = self._read_in_place(hidden, in_place_ids, topk_weights)
        native = self._native_host_part(exchange)
        split_here(lambda num_real_rows: self._host_part(num_real_rows, num_rows, copied, native), flag)
        rounds = []
        if self.stages_in_graphs:
            rounds.append(run_experts(hidden, weights, exchange.fetch_staged(num_rows), topk_weights))
        return expert_total(out, exchange.fetch_sum(num_rows), in_place + rounds, hidden.dtype)

    @property
    def stages_in_graphs(self) -> bool:
        """Whether the host parts of captured steps may copy experts to the staging slots (their graphs then run
        the staged pairs): with PCIe staging (pcie_frac > 0; then prompt streaming as in eager steps too). Without
        it, a graph launches nothing for staging."""
        return self.slots.num_staging > 0 and self.pcie_frac > 0

    def _native_host_part(self, exchange: HostExchange) -> NativeHostPart | None:
        """The host part as one native call, for this exchange (native_host_part.py); None where the Python one
        runs: PCIe staging, float experts or the torch pool, or STRATA_PY_HOST_PART=1 (an A/B switch, read at
        capture)."""
        if self._native is None or self._native[0] is not exchange:
            weights = self.slots.host_weights(self.layer_idx)
            runs = not self.stages_in_graphs and NativeHostPart.runs(exchange, weights, self.pool)
            self._native = (exchange, NativeHostPart(exchange, weights, self.pool, self.stats) if runs else None)
        return None if debug_flag("PY_HOST_PART") else self._native[1]

    def _host_part(self, num_real_rows: int, num_rows: int, copied: torch.cuda.Event | None = None,
                   native: NativeHostPart | None = None) -> None:
        """Between two graphs of a replay: wait for the copies to the host (the `copied` event, else everything
        queued); copy the experts of the staging plan to the staging slots (queued on the stream first, so the
        copies run while the CPU computes) and write their pairs' slots for the next graph; compute the other
        missed pairs of the real rows on the CPU into the pinned CPU sum, which the next graph copies in (padding
        rows get zeros). Runs once per offloaded layer per step on the step's critical path, hence numpy views, or
        `native` (the same work in one call)."""
        exchange = self.exchange
        if copied is not None:
            copied.synchronize()
        else:
            torch.cuda.current_stream().synchronize()
        if native is not None:
            native(num_real_rows, num_rows)
            return
        exchange.cpu_sum_np[:num_rows].fill(0)
        slot_ids = exchange.slot_ids_np[:num_real_rows]
        rows, ks = np.nonzero(slot_ids == NOT_RESIDENT)  # [M] each: the missed pairs (not those read in place)
        in_place_rows = np.nonzero(slot_ids == IN_PLACE)[0] if self.slots.zero_copy_per_layer[self.layer_idx] else None
        experts, on_cpu, bytes_copied = exchange.topk_ids_np[rows, ks], None, 0
        if self.stages_in_graphs:
            exchange.staged_ids_np[:num_rows].fill(-1)
            if len(rows):
                chosen, staged = self._staging_plan(experts, num_real_rows)
                chosen = chosen[:self.slots.num_staging]   # one round: the rest on the CPU
                on_cpu = (staged < 0) | (staged >= len(chosen))
                if len(chosen):
                    slot_of = np.asarray(self.slots.stage(self.layer_idx, chosen.tolist()))
                    exchange.staged_ids_np[rows[~on_cpu], ks[~on_cpu]] = slot_of[staged[~on_cpu]]
                    bytes_copied = len(chosen) * self.slots.expert_bytes(self.layer_idx)
        if on_cpu is not None:
            rows, ks, experts = rows[on_cpu], ks[on_cpu], experts[on_cpu]
        if len(rows):  # the real rows only: the CPU kernel converts its hidden rows to float32 whole
            self._add_cpu_pairs(exchange.hidden[:num_real_rows], rows, experts, exchange.topk_weights_np[rows, ks],
                                exchange.cpu_sum[:num_real_rows])
        num_staged = 0 if on_cpu is None else int((~on_cpu).sum())
        pcie_rows = [np.nonzero(exchange.staged_ids_np[:num_real_rows] >= 0)[0]] if num_staged else []
        if in_place_rows is not None and len(in_place_rows):
            pcie_rows.append(in_place_rows)
        if len(rows) or pcie_rows:
            pcie_rows = np.concatenate(pcie_rows) if pcie_rows else rows[:0]
            self.stats.record_offloaded(len(rows), len(pcie_rows), bytes_copied)
            self.stats.record_rows(rows, pcie_rows)

    def _add_cpu_pairs(self, hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                       cpu_sum: torch.Tensor) -> None:
        """cpu_sum [T, D] float32 (host) += this layer's pairs (rows into hidden [T, D], host) on the CPU pool."""
        self.pool.accumulate(hidden, rows, experts, weights, self.slots.host_weights(self.layer_idx), cpu_sum)

    def _staging_plan(self, experts: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """experts [M] of the missed pairs -> (chosen [C]: the distinct experts to copy, most used first, then by
        id; [M] each pair's index into chosen, -1 for the CPU). Chosen: the pcie_frac most used distinct experts
        (at most as many as there are staging slots), and every one with at least prompt_stream_min_pairs pairs.
        Plain Python: it runs in the host part of every offloaded layer step (~6 us for a decode step's pairs on
        the development VM, where the torch ops it replaced took 67: bench/results/2026-12-04-cpu-session41)."""
        ids = experts.tolist()
        if self.slots.num_staging == 0 or not ids:
            return experts[:0], np.full(len(ids), -1, dtype=np.int64)
        counts = collections.Counter(ids)
        used = sorted(counts, key=lambda e: (-counts[e], e))
        take = min(round(self.pcie_frac * len(used)), self.slots.num_staging) if self.pcie_frac > 0 else 0
        if self.prompt_stream_min_pairs and num_rows >= self.prompt_stream_min_pairs:  # (an expert's pairs <= rows)
            take = max(take, sum(counts[e] >= self.prompt_stream_min_pairs for e in used))  # a prefix of `used`
        index_of = {e: i for i, e in enumerate(used[:take])}
        return (np.array(used[:take], dtype=np.int64),
                np.array([index_of.get(e, -1) for e in ids], dtype=np.int64))

    def _stage(self, slot_ids: torch.Tensor, rows: torch.Tensor, ks: torch.Tensor, experts: torch.Tensor,
               staged: torch.Tensor) -> torch.Tensor:
        """Copy `experts` (at most num_staging) into the staging slots, in order -> [T, K] like slot_ids: the staging
        slot of each pair (rows, ks) whose expert is experts[staged], -1 elsewhere. Built on the host and sent
        without waiting for the stream (pinned memory), so the CPU's pairs are not held back by the device's."""
        slot_of = self.slots.stage(self.layer_idx, experts.tolist())
        device = slot_ids.device
        round_ids = torch.full(slot_ids.shape, -1, dtype=slot_ids.dtype, pin_memory=device.type == "cuda")
        round_ids[rows, ks] = torch.tensor(slot_of, dtype=slot_ids.dtype)[staged]
        return round_ids.to(device, non_blocking=True)


def expert_total(resident: torch.Tensor | None, cpu_sum: torch.Tensor | None, staged: list[torch.Tensor],
                 dtype: torch.dtype) -> torch.Tensor:
    """A layer's expert output [T, D] in `dtype` from its parts on the device: the resident pairs' (None: none),
    the CPU's float32 sum (None: none) and each round of staged pairs', added in float32 in that order and rounded
    once; the eager and the captured paths both sum this way, so they give the same bits."""
    total = None if resident is None else resident.float()
    for part in (cpu_sum, *(s.float() for s in staged)):
        if part is not None:
            total = part if total is None else total + part
    return total.to(dtype)
