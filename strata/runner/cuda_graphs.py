"""CUDA graphs for decode and verification steps, keyed by layout and held in a bounded LRU cache.

A layout is (padded slot count, tokens per slot): every slot of the step brings the same number of
tokens (1 for plain decode, 1 + k for verification). Slot counts are padded up a ladder so a few graphs
serve every batch size. Graphs are captured by a warm-up ladder at start (`warm_up`) and otherwise the
first time a layout is seen (after one warm-up run of it), on padding inputs only, so capturing never
advances any request's recurrent state; the step's real inputs are then copied into the persistent
buffers and the graph is replayed.

Fresh prompts (nothing computed yet, at most `max_prompt_tokens`) have layouts too: (1, length padded
up to a power of two). Their own causal attention is all a fresh prompt attends to, so padding rows at
its end change none of its real rows. A step that mixes such prompts with decode or verification
windows replays one graph per prompt and one for the windows (`split_layouts`), where it used to run
every kernel eagerly; models with recurrent state (Gated DeltaNet) do not take this path.

When the cache is full the least recently used graph is released (`CUDAGraph.reset`) before the new
one is captured. A capture that fails marks its layout eager-only; the step then runs eagerly.

Layers that need the host mid-step (MoE layers with offloaded experts) split the capture into a
chain of graphs (split_graphs.py). Which layers split is decided at capture; `host_plan` reports
(placement epoch, layers that need the host now, layers with no expert on the device), and a graph
captured under another epoch, that does not split at all of those layers, or that skipped the device
experts of a layer that has some now, is captured again.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from strata.model.context import ForwardContext
from strata.runner.graph_inputs import GraphInputs
from strata.runner.split_graphs import SplitCapture, SplitGraph
from strata.types import ScheduledSlot

logger = logging.getLogger(__name__)

# padded slot counts: exact up to 8 (padding rows route to experts too, so small batches pad little)
SLOT_LADDER = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128)
MIN_PROMPT_LAYOUT = 16  # fresh prompts pad up to 16, 32, 64, ... tokens


@dataclass
class CapturedStep:
    graph: SplitGraph
    hidden: torch.Tensor                    # [S_pad * n, D], written by every replay
    window_states: dict                     # layer -> (conv [T, C, W-1], ssm [T, Hv, Dk, Dv]) when kept
    pool_bytes: int                         # growth of reserved memory during warm-up and capture
    host_plan: tuple = (0, frozenset(), frozenset())  # (epoch, layers split at, device part skipped)


@dataclass
class GraphStep:
    """A replayed step seen through its real slots only (padding rows sliced off)."""

    input_ids: torch.Tensor                 # [T]
    hidden: torch.Tensor                    # [T, D]
    ctx: ForwardContext


class CudaGraphCache:
    def __init__(self, model: nn.Module, inputs: GraphInputs, kv_caches: dict, state_caches: dict,
                 max_slots: int, max_tokens_per_slot: int, capacity: int,
                 host_plan: Callable[[], tuple] | None = None, real_rows: torch.Tensor | None = None,
                 max_prompt_tokens: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"cuda_graph_cache_size must be at least 1, got {capacity}")
        self.model, self.inputs = model, inputs
        self.host_plan = host_plan or (lambda: (0, frozenset(), frozenset()))
        # a device scalar the forward reads (routing statistics skip padding rows): each step copies
        # the real row count into it, 0 while warming up and capturing on padding only
        self.real_rows = real_rows
        self.kv_caches, self.state_caches = kv_caches, state_caches
        # verification windows of hybrid models record the recurrent state after every token: one set
        # of buffers for the largest layout, shared by every graph
        max_tokens = max_slots * max_tokens_per_slot
        self.window_buffers = {
            layer: (conv.new_empty(max_tokens, *conv.shape[1:]), ssm.new_empty(max_tokens, *ssm.shape[1:]))
            for layer, (conv, ssm) in state_caches.items()} if max_tokens_per_slot > 1 else {}
        self.ladder = tuple(s for s in SLOT_LADDER if s < max_slots) + (max_slots,)
        self.max_tokens_per_slot = max_tokens_per_slot
        # fresh prompts up to this many tokens replay graphs (0: never): see prompt_token_limit
        assert max_prompt_tokens == prompt_token_limit(max_prompt_tokens, max_prompt_tokens)
        self.max_prompt_tokens = max_prompt_tokens
        self.capacity = capacity
        self.graphs: OrderedDict[tuple[int, int], CapturedStep] = OrderedDict()
        self.eager_only: set[tuple[int, int]] = set()
        self.pool = None  # one memory pool shared by every graph, made at the first capture
        self.num_captures = self.num_evictions = self.num_replays = 0
        self.capture_seconds = 0.0  # wall time spent capturing, so step timings can leave it out

    def layout_for(self, scheduled: list[ScheduledSlot]) -> tuple[int, int] | None:
        """(padded slot count, tokens per slot) when the step fits a graph, else None."""
        n = scheduled[0].num_new_tokens
        if n > self.max_tokens_per_slot or len(scheduled) > self.ladder[-1] \
                or any(w.num_new_tokens != n for w in scheduled):
            return None
        key = (self.ladder[bisect.bisect_left(self.ladder, len(scheduled))], n)
        return None if key in self.eager_only else key

    def prompt_layout(self, work: ScheduledSlot) -> tuple[int, int] | None:
        """(1, padded length) for a fresh prompt (chunk) a graph can take, else None."""
        n = work.num_new_tokens
        if work.num_computed_tokens or n > self.max_prompt_tokens:
            return None
        key = (1, max(MIN_PROMPT_LAYOUT, 1 << (n - 1).bit_length()))
        return None if key in self.eager_only else key

    def split_layouts(self, scheduled: list[ScheduledSlot]) -> list[tuple[tuple[int, int], list[int]]] | None:
        """A step that no single layout fits, as graphs: (layout, indices into `scheduled`) for every
        fresh prompt and, for the other slots, one layout of uniform windows; None if some slot fits
        neither (it runs eagerly then)."""
        if not self.max_prompt_tokens:
            return None
        parts, windows = [], []
        for i, work in enumerate(scheduled):
            key = self.prompt_layout(work)
            if key is not None:
                parts.append((key, [i]))
            else:
                windows.append(i)
        if not parts:
            return None
        if windows:
            key = self.layout_for([scheduled[i] for i in windows])
            if key is None:
                return None
            parts.insert(0, (key, windows))
        return parts

    def ensure(self, key: tuple[int, int]) -> bool:
        """Capture the graph of `key` now unless it is cached and valid; False if it cannot be."""
        captured = self.graphs.get(key)
        if captured is not None and _still_valid(captured.host_plan, self.host_plan()):
            self.graphs.move_to_end(key)  # so the next capture of the same step does not evict it
            return True
        if captured is not None:
            self._release(key)
        started = time.perf_counter()
        captured = self._capture(key)
        self.capture_seconds += time.perf_counter() - started
        return captured is not None

    def run(self, key: tuple[int, int], scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]],
            feed: torch.Tensor | None = None) -> GraphStep | None:
        """Replay (capturing first if needed) the graph of `key` on this step; None if it cannot be
        captured. `feed` [S]: device token ids that replace the first rows' input ids (one token per slot)."""
        # re-placed experts, or a layer that now needs the host where the graph runs through: capture again
        if not self.ensure(key):
            return None
        captured = self.graphs[key]
        num_slots, n = key
        self.inputs.fill(scheduled, block_tables, num_slots, n)
        if feed is not None:
            self.inputs.feed_input_ids(feed)
        real = sum(w.num_new_tokens for w in scheduled)  # a prompt's padding rows come last
        captured.graph.replay(real)
        self.num_replays += 1
        input_ids, ctx = self.inputs.context(len(scheduled), n, self.kv_caches, self.state_caches,
                                             keep_window_states=bool(captured.window_states))
        ctx.query_lens = [w.num_new_tokens for w in scheduled]
        ctx.num_computed = [w.num_computed_tokens for w in scheduled]
        ctx.window_states = {layer: (conv[:real], ssm[:real]) for layer, (conv, ssm) in captured.window_states.items()}
        return GraphStep(input_ids, captured.hidden[:real], ctx)

    def warm_up(self) -> int:
        """Capture the layouts decoding will use before any request arrives (as many as the cache
        holds: plain decode for every ladder size first, then fresh prompts, then longer verification
        windows), so no request waits for a capture. Returns the number captured."""
        decode = [(slots, 1) for slots in self.ladder]
        prompts = [(1, n) for n in _powers_of_two(MIN_PROMPT_LAYOUT, self.max_prompt_tokens)]
        windows = [(slots, n) for n in range(2, self.max_tokens_per_slot + 1) for slots in self.ladder]
        keys = decode + prompts + windows
        captured = 0
        for key in keys[:self.capacity]:
            if key not in self.graphs and self._capture(key) is not None:
                captured += 1
        return captured

    @property
    def pool_bytes(self) -> int:
        return sum(c.pool_bytes for c in self.graphs.values())

    def _capture(self, key: tuple[int, int]) -> CapturedStep | None:
        while len(self.graphs) >= self.capacity:
            self._release(next(iter(self.graphs)))
            self.num_evictions += 1
        num_slots, n = key
        keep_window_states = bool(self.state_caches) and n > 1
        reserved_before = torch.cuda.memory_reserved()
        try:
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            self.inputs.fill([], {}, num_slots, n)  # padding only: scratch KV block and state row
            input_ids, ctx = self.inputs.context(num_slots, n, self.kv_caches, self.state_caches, keep_window_states)
            ctx.window_buffers = self.window_buffers
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up: compiles kernels and sizes workspaces
                self._forward(num_slots, input_ids, ctx)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            ctx.window_states = {}
            host_plan = self.host_plan()
            with SplitCapture(self.pool) as capture:
                hidden = self._forward(num_slots, input_ids, ctx)
            torch.cuda.synchronize()  # surfaces capture errors here, not in a later step
        except Exception:
            logger.exception("capturing the CUDA graph for layout %s failed; it runs eagerly", key)
            self.eager_only.add(key)
            torch.cuda.synchronize()
            return None
        captured = CapturedStep(capture.result, hidden, dict(ctx.window_states),
                                max(0, torch.cuda.memory_reserved() - reserved_before), host_plan)
        self.graphs[key] = captured
        self.num_captures += 1
        return captured

    def _forward(self, num_slots: int, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        self.inputs.derive_flags(num_slots)
        if self.real_rows is not None:
            self.real_rows.copy_(self.inputs.num_real_rows)
        return self.model(input_ids, ctx)

    def _release(self, key: tuple[int, int]) -> None:
        self.graphs.pop(key).graph.reset()
        logger.debug("released CUDA graph %s", key)

    def release_all(self) -> None:
        for captured in self.graphs.values():
            captured.graph.reset()
        self.graphs.clear()


def prompt_token_limit(requested: int, max_len: int) -> int:
    """The longest fresh prompt given a graph: the largest power of two within both limits, so every
    padded prompt layout fits the graph inputs and the model's positions; 0 (none) below 16."""
    limit = min(requested, max_len)
    return 0 if limit < MIN_PROMPT_LAYOUT else 1 << (limit.bit_length() - 1)


def _powers_of_two(low: int, high: int) -> list[int]:
    return [1 << e for e in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << e <= high]


def _still_valid(captured: tuple, now: tuple) -> bool:
    """Plans are (epoch, layers split at, layers whose device experts were skipped)."""
    return captured[0] == now[0] and now[1] <= captured[1] and captured[2] <= now[2]
