"""KV beyond VRAM, staged: each attention layer's host-tier blocks of a step copied into a device ring ahead of
its attention, on a copy stream, while the layers before it compute (--kv-staging-layers R).

Without staging the attention kernel reads the host tier over PCIe itself, inside the layer: at 128K tokens of
context and a 16K window that is ~0.23 GB a step at fp8 on Qwen3-Next's 8-layer shape, ~4.7 ms the step waits
for. Staged, the same bytes cross while other layers run. The ring has R entries of `capacity` blocks
(every key a layer reads: K, V and an int8 cache's scales); attention layer i (in forward order, the MTP
layer last) uses entry i % R. Per step (`begin` lays out the rows; `start`, once the step's inputs are
queued), the copy stream waits for what the main stream queued before it (the plan's offload copies into
the tier), then copies the first R layers' blocks; layer i's
attention waits for its copy (`before_attention`), and once it has read the entry (`after_attention`) the
copy of layer i + R into that entry is queued behind it.

The last R layers' entries are refilled the same way for the next step's first R layers, with this step's
blocks: a copy made ahead. A step's host blocks are almost always the last one's (a block joins the tier every
block_size tokens of a sequence), so `start` keeps such a copy where the step's rows are the same and no block
it read was written since (HostKVPool.written_since), and copies afresh otherwise. The first attention layer
then no longer waits for a whole layer's copy at the start of every step: at 128K tokens that copy would
have had only the layers before it to hide behind, and the copy engine sat idle from the last attention layer
to the next step.

The step's context sees a host tier whose blocks sit at staging indices: `view` maps each layer's keys to its
ring entry, and the host tables (`begin`'s result) list each slot's blocks at consecutive ring rows, slot
after slot. The attention paths are those of an unstaged tier. CUDA graphs are captured reading the ring;
the two hooks are split points (strata/split_graphs.py), so their stream work runs between a step's graphs.
A step whose host blocks do not fit the ring is not staged: it runs eagerly against the tier itself.
Models with further per-token caches (QSA's index keys) are not staged.

A copy engine runs its copies in order, whatever their streams: a small transfer of the main stream queued
behind a layer's ~100 MB copy waits for all of it (bench/results/2026-12-03-h200-session27/). So the ring's
copies are queued after the step's input uploads, and offloaded MoE layers make their transfers by kernels
(experts/provider.py HostExchange).
"""

from __future__ import annotations

import contextlib

import torch

from strata.cache.host_kv import HostKVPool
from strata.config import kv_scale_key
from strata.split_graphs import split_here
from strata.transfer import consecutive_runs, raw
from strata.types import ScheduledSlot


class HostKVStaging:
    copies_ahead = True  # the last layers' entries refilled for the next step (module docstring; False: not)

    def __init__(self, tier_pool: HostKVPool, layers: list[int], ring_size: int, capacity: int,
                 device: torch.device | str) -> None:
        """tier_pool: the host tier; layers: the attention layers in forward order."""
        tier_caches = tier_pool.caches
        attention = [k for k in tier_caches if isinstance(k, int)]  # (a layer left out, e.g. an idle MTP layer)
        extra = [k for k in tier_caches if k not in attention and k not in {kv_scale_key(i) for i in attention}]
        if extra:
            raise ValueError(f"KV staging takes attention K/V (and int8 scales) only; this model also pages {extra}")
        if ring_size < 1 or capacity < 1:
            raise ValueError(f"KV staging needs a ring of at least one layer and one block, got {ring_size} x "
                             f"{capacity}")
        self.tier_pool = tier_pool
        self.layers = list(layers)
        self.capacity = capacity
        self.ring_size = min(ring_size, len(self.layers))
        self.keys_of = {layer: [k for k in (layer, kv_scale_key(layer)) if k in tier_caches] for layer in self.layers}
        first = self.keys_of[self.layers[0]]
        self.ring = [{kind: tuple(torch.empty((capacity, *t.shape[1:]), dtype=t.dtype, device=device)
                                  for t in tier_caches[key]) for kind, key in zip(("kv", "scale"), first)}
                     for _ in range(self.ring_size)]
        self.entry_of = {layer: i % self.ring_size for i, layer in enumerate(self.layers)}
        # the tier as the attention layers see it: every key in its layer's ring entry
        self.view = {key: self.ring[self.entry_of[layer]][kind] for layer in self.layers
                     for kind, key in zip(("kv", "scale"), self.keys_of[layer])}
        self.cuda = torch.device(device).type == "cuda"
        self.copy_stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.copied: dict[int, torch.cuda.Event] = {}
        self.released: list[torch.cuda.Event | None] = [None] * self.ring_size
        self.runs: list[tuple[int, int, int]] | None = None  # this step's (ring row, tier block, count); None: idle
        self.rows: dict[int, list[int]] = {}  # this step's slots' blocks as ring rows
        self._runs_of: dict[int, tuple[list[int], list]] = {}  # slot -> (its host blocks, their runs)
        # copies made ahead for the next step: layer -> (the runs copied, the tier's generation then, done event)
        self.ahead: dict[int, tuple[list, int, torch.cuda.Event | None]] = {}
        self.reused = 0  # the steps' first layers that found their copy made ahead (for tests and benchmarks)

    def fits(self, scheduled: list[ScheduledSlot], tables: dict[int, list[int]]) -> bool:
        """Whether the slots' host blocks (their tier `tables`) fit one ring entry."""
        return sum(len(tables.get(w.slot_id, ())) for w in scheduled) <= self.capacity

    def begin(self, scheduled: list[ScheduledSlot], tables: dict[int, list[int]]) -> dict[int, list[int]] | None:
        """Stage this step's host blocks (the slots' tier `tables`): -> each slot's blocks as ring rows, or
        None when they do not fit the ring (the step then reads the tier itself). Nothing is queued before
        `start`."""
        if not self.fits(scheduled, tables):
            self.runs = None
            self.ahead.clear()
            return None
        # one dict, refilled: its identity keys the runner's cached arrays of it (table_arrays.py)
        staged, self.runs, offset = self.rows, [], 0
        staged.clear()
        for work in scheduled:
            ids = tables.get(work.slot_id, ())
            staged[work.slot_id] = list(range(offset, offset + len(ids)))
            runs = self._slot_runs(work.slot_id, ids)
            self.runs.extend((offset + first, start, count) for first, start, count in runs)
            offset += len(ids)
        self.copied = {}
        return staged

    def start(self) -> None:
        """Queue the copies of the first ring_size layers of the step `begin` staged, once the step's own
        uploads (its inputs) are queued: a copy engine runs its copies in order, so an input copy queued
        after a layer's ~100 MB would hold the whole step back until that copy ends."""
        if self.runs is None:
            return
        if self.cuda:
            self.copy_stream.wait_stream(torch.cuda.current_stream())  # the tier's offload copies landed
        ahead, self.ahead = self.ahead, {}
        for layer in self.layers[:self.ring_size]:
            made = ahead.get(layer)
            if made is not None and self._still_valid(*made[:2]):
                self.copied[layer] = made[2]
                self.reused += 1
            else:
                self._copy(layer)

    def _still_valid(self, runs: list, generation: int) -> bool:
        """Whether a copy of `runs` made when the tier was at `generation` is this step's: the same rows of the
        same blocks, none of them written since."""
        if runs != self.runs:
            return False
        for block in self.tier_pool.written_since(generation).tolist():
            if any(start <= block < start + count for _, start, count in runs):
                return False
        return True

    def _slot_runs(self, slot_id: int, ids: list[int]) -> list[tuple[int, int, int]]:
        """consecutive_runs(ids) of a slot, found again only when its host blocks changed (a block every
        block_size tokens): a 128K-token context has ~7,000 of them, too many to walk in Python every step."""
        cached = self._runs_of.get(slot_id)
        if cached is None or cached[0] != ids:
            cached = self._runs_of[slot_id] = (list(ids), consecutive_runs(ids))
        return cached[1]

    def end(self) -> None:
        """The step's forward is queued: no copy follows a later release. (An MTP pass that reads the step's
        context still waits for its layer's copy, queued in that forward; the next `begin` waits for the
        main stream, so no copy overwrites an entry before the pass has read it.)"""
        self.runs = None

    def before_attention(self, layer: int) -> None:
        """Layer `layer` reads its ring entry next: its copy first (a split point in a graph capture)."""
        if layer in self.entry_of and not split_here(lambda _: self._wait(layer)):
            self._wait(layer)

    def after_attention(self, layer: int) -> None:
        """Layer `layer` has read its entry: queue the copy of the layer ring_size later into it."""
        if layer in self.entry_of and not split_here(lambda _: self._release(layer)):
            self._release(layer)

    def _wait(self, layer: int) -> None:
        # also after `end`: an MTP pass reading the step's context reads the copy of its layer queued then
        event = self.copied.get(layer)
        if event is not None:
            torch.cuda.current_stream().wait_event(event)

    def _release(self, layer: int) -> None:
        if self.runs is None:
            return
        entry = self.entry_of[layer]
        if self.cuda:
            self.released[entry] = torch.cuda.Event()
            self.released[entry].record()
        later = self.layers.index(layer) + self.ring_size
        if later < len(self.layers):
            self._copy(self.layers[later])
        elif self.copies_ahead:  # the next step's layer in this entry, with this step's blocks
            self._copy(self.layers[later - len(self.layers)], ahead=True)

    def _copy(self, layer: int, ahead: bool = False) -> None:
        """Layer `layer`'s blocks of the step into its ring entry (after that entry's last reader); `ahead`:
        for the next step (kept in self.ahead until its `start`)."""
        entry = self.ring[self.entry_of[layer]]
        stream = self.copy_stream
        if stream is not None and self.released[self.entry_of[layer]] is not None:
            stream.wait_event(self.released[self.entry_of[layer]])
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for kind, key in zip(("kv", "scale"), self.keys_of[layer]):
                for target, source in zip(entry[kind], self.tier_pool.caches[key]):
                    for first, start, count in self.runs:
                        raw(target)[first:first + count].copy_(raw(source)[start:start + count], non_blocking=True)
            done = None
            if stream is not None:
                done = torch.cuda.Event()
                done.record(stream)
        if ahead:
            self.ahead[layer] = (list(self.runs), self.tier_pool.generation, done)
        else:
            self.copied[layer] = done

