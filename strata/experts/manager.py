"""Wires expert placement into a loaded model: routing statistics on every MoE block and, when the
expert cache holds fewer than all experts, the host copy, the slot cache, the CPU pool and an
OffloadedExperts provider in each block. `end_step()` runs once per step, outside any graph: it folds
the step's statistics, publishes finished background copies and every `expert_swap_interval` steps
updates the hot set from the window's routing counts.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys
import weakref

import torch
from torch import nn

from strata.config import ExpertConfig
from strata.experts.calibrate import measure_in_place_share, measure_pcie_share
from strata.experts.cpu_pool import CpuExpertPool
from strata.transfer import host_copy
from strata.experts.placement import (AUTO_ZERO_COPY_SHARE_OF_MISSED, initial_hot_set, plan_swaps, staging_capacity,
                                     zero_copy_set)
from strata.experts.profile import load_profile, save_profile
from strata.experts.provider import HostExchange, OffloadedExperts
from strata.experts.slots import ExpertSlots
from strata.experts.stats import CounterMark, RoutingStats, all_rows
from strata.kernels.packed_moe import pairs_supported
from strata.model.moe import MoEBlock, PackedLocalExperts

logger = logging.getLogger(__name__)

# at most this share of the hot set changes per update, which bounds the PCIe traffic of one update
_MAX_SWAP_SHARE = 1 / 8


def install_experts(model: nn.Module, config: ExpertConfig, device: str, quiet: bool = True) -> ExpertManager | None:
    """The model's ExpertManager, which places its experts (None for a model without MoE layers); the
    engine builder hands it to whoever needs it."""
    # (not another pipeline stage's layers, which are shapes on the meta device here)
    every = [m for m in model.modules() if isinstance(m, MoEBlock)]
    ids = [i for i, m in enumerate(every) if not m.gate.weight.is_meta]
    blocks = [every[i] for i in ids]
    return ExpertManager(model, blocks, config, device, quiet, (ids, len(every))) if blocks else None


class ExpertManager:
    def __init__(self, model: nn.Module, blocks: list[MoEBlock], config: ExpertConfig, device: str,
                 quiet: bool, model_layers: tuple[list[int], int] | None = None) -> None:
        """`blocks`: the MoE layers this process runs; `model_layers`: (their indices among, the number of) the
        model's MoE layers (None: they are all of them; a pipeline stage runs its own): a routing profile holds
        the model's rows, of which a stage reads and writes its own."""
        self.config, self.blocks = config, blocks
        self.layer_ids, self.num_model_layers = model_layers or (list(range(len(blocks))), len(blocks))
        self.architecture = model.config.architecture
        self.num_layers, self.num_experts = len(blocks), model.config.num_experts
        self.top_k = model.config.num_experts_per_tok
        self.real_rows = all_rows(device)  # [1] rows the next forward counts (RoutingStats.real_rows)
        self.stats = RoutingStats(self.num_layers, self.num_experts, device, self.real_rows)
        for layer_idx, block in enumerate(blocks):
            block.attach_experts(layer_idx, self.stats)
        self.profile_counts = self._load_profile()
        self.num_slots = config.num_slots(self.num_layers * self.num_experts)
        self.slots: ExpertSlots | None = None
        self.pool: CpuExpertPool | None = None
        self.pcie_frac = 0.0  # resolved from config.pcie_frac (measured for auto) when experts are offloaded
        self.zero_copy: tuple[float, bool] | None = None  # (share, of the missed only) read in place: _zero_copy_share
        self.num_steps = 0
        self.exchange: HostExchange | None = None  # split-graph buffers, made by prepare_graphs
        self.epoch = 0                             # bumped whenever the experts are placed
        if self.num_slots < self.num_layers * self.num_experts:
            self._offload(device)
        if config.expert_profile:
            atexit.register(_save_at_exit, weakref.ref(self))
        if not quiet:
            print(f"experts: {self.describe()}", file=sys.stderr)

    def _load_profile(self) -> torch.Tensor | None:
        path = self.config.expert_profile
        if not path or not os.path.exists(path):
            return None
        return load_profile(path, self.num_model_layers, self.num_experts)[self.layer_ids]

    def _offload(self, device: str) -> None:
        pin = torch.cuda.is_available()
        host_w13, host_w2 = [], []  # L x [E, 2I, D], L x [E, D, I] (or their GGUF blocks)
        packed = isinstance(self.blocks[0].experts, PackedLocalExperts)
        qtypes = [(b.experts.qtype13, b.experts.qtype2) for b in self.blocks] if packed else None
        for block in self.blocks:
            host_w13.append(host_copy(block.experts.w13, pin))
            host_w2.append(host_copy(block.experts.w2, pin))
            # the loaded weights go as soon as they are copied: one layer more at peak, not the experts twice
            if packed:
                block.experts.w13, block.experts.w2 = host_w13[-1][:0], host_w2[-1][:0]
            else:
                block.experts.w13.data, block.experts.w2.data = host_w13[-1][:0], host_w2[-1][:0]
        self.pool = CpuExpertPool(self.config.cpu_threads, self.config.cpu_expert_kernel)
        self._place(host_w13, host_w2, qtypes, device)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()  # the device copies of all experts are gone
            # the host thread only feeds the device and indexes pairs: a team of intra-op threads would
            # spin on the cores the expert pool computes on (measured 5x slower decode on the H200 host)
            torch.set_num_threads(1)
            if packed:
                self.pool.poll_between_layers(qtypes[0])

    def _place(self, host_w13: list[torch.Tensor], host_w2: list[torch.Tensor], qtypes: list | None,
               device: str) -> None:
        """Device slots for the hot set (+ PCIe staging), filled from the host copies; providers in
        every MoE block."""
        pcie = self.config.parse_pcie_frac()
        if pcie is None:
            pcie = measure_pcie_share(host_w13[0], host_w2[0], self.pool, device, qtypes[0] if qtypes else None)
        self.pcie_frac = pcie
        # prompt chunks stream experts over PCIe only to a GPU (on the CPU both sides are the same cores)
        stream = self.config.prompt_stream_min_pairs if torch.device(device).type == "cuda" else 0
        num_staging = math.ceil((1.0 if stream else pcie) * staging_capacity(self.num_experts, self.top_k))
        self.slots = ExpertSlots(host_w13, host_w2, self.num_slots, num_staging, device, qtypes)
        self.slots.fill(initial_hot_set(self.num_slots, self.num_layers, self.num_experts, self.config.expert_split,
                                        self.profile_counts))
        self.zero_copy = self._zero_copy_share(host_w13, host_w2, qtypes, device)
        self._update_zero_copy(self.profile_counts)
        for layer_idx, block in enumerate(self.blocks):
            provider = OffloadedExperts(layer_idx, self.slots, self.pool, self.stats, pcie, stream)
            provider.exchange = self.exchange
            block.attach_experts(layer_idx, self.stats, provider)
        self.stats.has_placement = True
        self.epoch += 1  # captured graphs point at the old slots and providers

    def _zero_copy_share(self, host_w13: list[torch.Tensor], host_w2: list[torch.Tensor], qtypes: list | None,
                         device: str) -> tuple[float, bool] | None:
        """(share, of the missed experts only) of each layer's experts read in place, or None for none. Auto:
        AUTO_ZERO_COPY_SHARE_OF_MISSED of the experts outside the hot set on a GPU that can read them so (packed
        experts with a pairs kernel), else none; measure: the same with the share timed on this machine
        (calibrate.measure_in_place_share); an explicit share where the device cannot is an error."""
        share = self.config.parse_zero_copy_frac()
        if not isinstance(share, str):
            if share > 0:
                _check_zero_copy(host_w13, host_w2, qtypes, device)
            return (share, False) if share > 0 else None
        if torch.device(device).type != "cuda":
            return None  # the "device" is the CPU pool's own cores: reading in place would gain nothing
        try:
            _check_zero_copy(host_w13, host_w2, qtypes, device)
        except ValueError:
            return None
        if share == "auto":
            return AUTO_ZERO_COPY_SHARE_OF_MISSED, True
        missed = (~self.slots.resident_mask()).sum(1)                                            # [L]
        offloaded = [layer for layer in range(self.num_layers) if missed[layer] > 0]
        if not offloaded:
            return None
        missed_pairs = self.top_k * float(missed[offloaded].float().mean()) / self.num_experts  # a decode row's
        measured = measure_in_place_share([self.slots.host_weights(layer) for layer in offloaded], self.pool, device,
                                          missed_pairs)
        logger.info("zero_copy_frac measure: %.2f of each layer's missed experts read in place", measured)
        return measured, True

    def _update_zero_copy(self, counts: torch.Tensor | None) -> None:
        """Read in place the most routed experts (by `counts` [L, E], else the lowest ids) outside the hot set."""
        if self.zero_copy is not None:
            share, of_missed = self.zero_copy
            self.slots.set_zero_copy(zero_copy_set(share, self.slots.resident_mask(), counts, of_missed))

    def replace(self, config: ExpertConfig, device: str) -> None:
        """Place the offloaded experts again under another config (cache size, split, profile, PCIe
        share, swaps) from the host copies already held, with fresh statistics: an expert-cache sweep
        needs no new engine. Every expert on the device takes a new engine (it runs without slots)."""
        if self.slots is None:
            raise ValueError("replace() re-places offloaded experts; this engine holds every expert on the device")
        total = self.num_layers * self.num_experts
        num_slots = config.num_slots(total)
        if num_slots >= total:
            raise ValueError("every expert on the device needs an engine built with expert_cache=all")
        host_w13, host_w2, qtypes = self.slots.host_w13, self.slots.host_w2, self.slots.qtypes
        self.slots = None
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the old slots go before the new ones are allocated
        self.config, self.num_slots, self.num_steps = config, num_slots, 0
        self.profile_counts = self._load_profile()
        self.stats = RoutingStats(self.num_layers, self.num_experts, device, self.real_rows)
        for layer_idx, block in enumerate(self.blocks):
            block.attach_experts(layer_idx, self.stats)
        if self.pool.num_threads != (config.cpu_threads or self.pool.num_threads) or \
                config.cpu_expert_kernel not in ("auto", self.pool.kernel):
            self.pool.close()
            self.pool = CpuExpertPool(config.cpu_threads, config.cpu_expert_kernel)
        self._place(host_w13, host_w2, qtypes, device)

    def describe(self) -> str:
        total = self.num_layers * self.num_experts
        if self.slots is None:
            return f"all {total} experts of {self.num_layers} MoE layers on the device"
        source = "profile" if self.profile_counts is not None else f"{self.config.expert_split} split"
        return (f"{self.num_slots} of {total} on the device ({self.num_slots / total:.0%}, hot set from the {source}), "
                f"the rest on {self.pool.num_threads} CPU threads ({self.pool.kernel} kernel); "
                f"{self.slots.num_staging} PCIe staging slots "
                f"(pcie_frac {self.pcie_frac:.2f}); {sum(self.slots.zero_copy_per_layer)} read in place over PCIe")

    @property
    def offloaded(self) -> bool:
        return self.slots is not None

    def prepare_graphs(self, max_tokens: int, dtype: torch.dtype, device: str, by_sm: bool = False) -> None:
        """Host-exchange buffers for split graphs of up to `max_tokens` token rows (the runner calls
        this before its first capture); `by_sm`: their copies made by kernels (see HostExchange)."""
        if self.slots is None or (self.exchange is not None and self.exchange.max_tokens >= max_tokens):
            return  # a second runner on the same model (a shared-weights baseline) keeps the captured buffers
        hidden_size = self.blocks[0].gate.weight.shape[1]
        self.exchange = HostExchange(max_tokens, self.top_k, hidden_size, dtype, device, by_sm)
        for block in self.blocks:
            block.experts.exchange = self.exchange

    def graph_plan(self) -> tuple[int, frozenset, frozenset]:
        """(placement epoch, layers that need the host now, layers with no expert on the device now):
        a graph captured under another epoch, that runs one of the former straight through, or that
        skipped the device experts of a layer that has some now, must be captured again."""
        if self.slots is None:
            return self.epoch, frozenset(), frozenset()
        resident, visible = self.slots.is_layer_resident, self.slots.visible_per_layer
        return (self.epoch, frozenset(layer for layer in range(self.num_layers) if not resident(layer)),
                frozenset(layer for layer in range(self.num_layers) if not visible[layer]))

    # ---- once per step ----------------------------------------------------------------------------

    def begin_rows(self, num_rows: int) -> None:
        """Count where each of the next forward's `num_rows` token rows had its pairs computed."""
        if self.slots is not None:
            self.stats.begin_rows(num_rows)

    def slot_pairs(self, work: list, starts: list[int]) -> dict[int, tuple[int, int, int]]:
        """After the forward begun by begin_rows: slot -> (routed pairs, CPU pairs, PCIe pairs) of the
        step's scheduled slots (`work`, their first token rows `starts`); {} when nothing was counted."""
        rows = self.stats.take_rows()
        if rows is None:
            return {}
        per_token = self.top_k * self.num_layers
        return {w.slot_id: (w.num_new_tokens * per_token, int(rows[0, s:s + w.num_new_tokens].sum()),
                            int(rows[1, s:s + w.num_new_tokens].sum())) for w, s in zip(work, starts)}

    def end_step(self) -> None:
        self.stats.end_step()
        self.num_steps += 1
        if self.slots is not None:
            self.slots.apply_ready()
        interval = self.config.expert_swap_interval
        if interval and self.num_steps % interval == 0:
            self.update_hot_set()

    def update_hot_set(self) -> int:
        """Swap the window's most used non-resident experts in for the least used resident ones, and read in place
        the most routed of those left outside (all counts so far); returns the number of swaps. Starts a new
        routing window."""
        num_swaps = 0
        if self.slots is not None:
            window = self.stats.window_counts.cpu()                                   # [L, E]
            swaps = plan_swaps(window, self.slots.resident_mask(),
                               self.config.expert_swap_threshold, max(1, int(self.num_slots * _MAX_SWAP_SHARE)))
            if swaps:
                num_swaps = len(swaps)
                self.stats.record_swaps(num_swaps, self.slots.swap(swaps))
            # the in-place set by all routing so far: a window of a few steps leaves most counts at 0 or 1
            self._update_zero_copy(self.profile_counts_now())
        self.stats.end_window()
        return num_swaps

    # ---- views and profile ------------------------------------------------------------------------

    def snapshot(self, with_counts: bool = False) -> dict:
        return {**self.stats.snapshot(with_counts), "resident_slots": self.num_slots,
                "total_experts": self.num_layers * self.num_experts}

    def counter_mark(self) -> CounterMark:
        """The step counters as the queued work leaves them, read back without a host sync."""
        return CounterMark(self.stats)

    def profile_counts_now(self) -> torch.Tensor:
        """[L, E] counts of the loaded profile plus everything routed since the start."""
        counts = self.stats.counts()
        return counts if self.profile_counts is None else counts + self.profile_counts

    def save_profile(self, path: str | None = None) -> str | None:
        path = path or self.config.expert_profile
        if path:
            steps = int(self.stats.num_steps.item())
            stage_rows = self.layer_ids if len(self.layer_ids) < self.num_model_layers else None  # (a split's)
            save_profile(path, self.profile_counts_now(), self.architecture, steps, stage_rows, self.num_model_layers)
        return path

    def close(self) -> None:
        if self.config.expert_profile:
            self.save_profile()
        if self.pool is not None:
            self.pool.close()


def _check_zero_copy(host_w13: list[torch.Tensor], host_w2: list[torch.Tensor], qtypes: list | None,
                     device: str) -> None:
    """zero_copy_frac on CUDA: the experts read in place must go through the pairs kernels, which skip the pairs
    computed elsewhere and read each of their experts' rows once (the 16-bit fused kernel would read an expert for
    every skipped pair; packed types without a pairs kernel would dequantize every expert over PCIe)."""
    if torch.device(device).type != "cuda":
        return
    if qtypes is None:
        raise ValueError("zero_copy_frac reads packed (GGUF) experts in place; the 16-bit fused kernel would read an "
                         "expert for every pair it skips: use pcie_frac for this model")
    for layer, ((qtype13, qtype2), w13, w2) in enumerate(zip(qtypes, host_w13, host_w2)):
        if not pairs_supported(qtype13, qtype2, w2.shape[1], w13.shape[1] // 2):
            raise ValueError(f"zero_copy_frac: MoE layer {layer}'s expert types ({qtype13}, {qtype2}) have no pairs "
                             "kernel to read them in place; use pcie_frac for this model")


def _save_at_exit(ref: weakref.ref) -> None:
    manager = ref()
    if manager is not None:
        try:
            manager.save_profile()
        except Exception:  # exiting anyway: say so, never raise from atexit
            logger.exception("saving the expert profile failed")
