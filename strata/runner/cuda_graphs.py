"""CUDA graphs for decode and verification steps, keyed by layout and held in a bounded LRU cache.

A layout is (padded slot count, tokens per slot): every slot of the step brings the same number of
tokens (1 for plain decode, 1 + k for verification). Slot counts are padded up a ladder so a few graphs
serve every batch size. Graphs are captured by a warm-up ladder at start (`warm_up`) and otherwise the
first time a layout is seen (after one warm-up run of it), on padding inputs only, so capturing never
advances any request's recurrent state; the step's real inputs are then copied into the persistent
buffers and the graph is replayed.

Fresh prompts (nothing computed yet, at most `max_prompt_tokens`) have layouts too: (prompts padded up
to a power of two, length padded up to a power of two), at most PROMPT_GRAPH_ROWS rows. Their own causal
attention is all a fresh prompt attends to, so padding rows at the end of each prompt change none of its
real rows, and recurrent layers stop each prompt's state after its real tokens. A step's fresh prompts
replay one such graph together (or a few, when they do not fit one), so the experts' weights are read
once for all of them rather than once per prompt; the step's decode or verification windows replay
their own graph (`split_layouts`; the runner decides which steps may, see runner/graph_parts.py). With
STRATA_MIXED_GRAPHS=1, where windows and prompts fit one graph together, a mixed layout holds both
(`mixed_layout`): the windows' rows first, then the prompts' padded ones, so the step reads the weights once
rather than once per graph (opt-in: graph_parts.py says why).
Routing statistics mask rows by count (`num_real_rows`), so those of a multi-prompt graph take some
padding rows in place of real ones: exact only for decode, verification and single-prompt layouts
(`strata profile` runs its prompts eagerly for this reason).

The cache holds every layout of the warm-up ladder by default (`cuda_graph_cache_size` 0). With a
smaller size, when the cache is full the least recently used graph is released (`CUDAGraph.reset`)
before the new one is captured. A capture that fails marks its layout eager-only; the step then runs
eagerly. A model may name a variant of a layout for some steps (model.graph_variant: Qwen4-Exp's steps that
read a sparse QSA context choose their blocks on the device); the key is then (slots, tokens, variant), captured
with ctx.graph_variant set, the first time such a step comes.

Layers that need the host mid-step (MoE layers with offloaded experts) split the capture into a
chain of graphs (split_graphs.py). Which layers split is decided at capture; `host_plan` reports
(placement epoch, layers that need the host now, layers with no expert on the device), and a graph
captured under another epoch, that does not split at all of those layers, or that skipped the device
experts of a layer that has some now, is captured again.

With a host KV tier (KV beyond VRAM, `host_kv`) every graph is captured reading it (the attention kernel's
host variant, on padding rows with no host blocks) and each replay fills the slots' host blocks beside
their device ones (graph_inputs.py), so steps of long contexts replay too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from strata.config import debug_flag
from strata.model.context import ForwardContext, ForwardScratch
from strata.model.ops import ROWS_ALIKE_MAX
from strata.runner.graph_inputs import GraphInputs
from strata.runner.graph_layouts import (MIN_PROMPT_LAYOUT, MIXED_GRAPH_ROOM, SLOT_LADDER, GraphLayouts, Layout,
                                         layout_variant, powers_of_two, prompt_token_limit, prompts_beside, slot_rows)
from strata.runner.kv_staging import HostKVStaging
from strata.runner.kv_tiers import HostKVTiers
from strata.runner.pipeline import graph_row_runs
from strata.runner.verify_graphs import Verdicts, VerifyGraphs
from strata.split_graphs import SplitCapture, SplitGraph, collector_held
from strata.types import ScheduledSlot

logger = logging.getLogger(__name__)

# decode and verify layouts of up to this many token rows replay their LM head as a graph (HEAD_GRAPH_MAX_ROWS x
# V float32 logits shared by all: 64 MB at Qwen4-Exp's 248K vocabulary): as many as a head's mixer rounds alike
# (ops.hyper_mix), so a head graph over padded rows samples what the eager head over the sampled rows does
HEAD_GRAPH_MAX_ROWS = ROWS_ALIKE_MAX


@dataclass
class CapturedStep:
    graph: SplitGraph
    hidden: torch.Tensor                    # [S_pad * n, D], written by every replay
    window_states: dict                     # layer -> (conv [T, C, W-1], ssm [T, Hv, Dk, Dv]) when kept
    pool_bytes: int                         # growth of reserved memory during warm-up and capture
    host_plan: tuple = (0, frozenset(), frozenset())  # (epoch, layers split at, device part skipped)
    derived: dict | None = None             # index tensors the capture built (ctx.cached): replays read them
    head: torch.cuda.CUDAGraph | None = None  # decode / verify layouts: the LM head on `hidden` into head_logits
    # verification steps planned ahead (runner/verify_graphs.py): their windows' shift, their verdicts by mode
    shift_graph: torch.cuda.CUDAGraph | None = None
    verify_tails: dict = field(default_factory=dict)
    verify_eager: set = field(default_factory=set)  # of those, the parts whose capture failed ("shift", a mode)
    stage_outputs: list | None = None  # a pipeline stage's activations for the next stage (Stage.capturing_layers)


@dataclass
class StepPart:
    """One graph part of a step replayed as several under a pipeline split (graph_parts.forward_split): where its
    slots' rows are in the step, and the step's activations, received once before the first part and sent once
    after the last (A x [T, W] each; None on the first / last stage)."""

    plan_starts: list[int]                  # the step's row of each of the part's slots' first token
    received: list[torch.Tensor] | None
    outputs: list[torch.Tensor] | None


@dataclass
class GraphStep:
    """A replayed step seen through its real slots only (padding rows sliced off)."""

    input_ids: torch.Tensor                 # [T]
    hidden: torch.Tensor                    # [T, D]
    ctx: ForwardContext
    logits: Callable[[], torch.Tensor] | None = None  # replays the layout's LM head graph -> [T, V] float32


class CudaGraphCache(GraphLayouts):
    def __init__(self, model: nn.Module, inputs: GraphInputs, kv_caches: dict, state_caches: dict,
                 max_slots: int, max_tokens_per_slot: int, capacity: int,
                 host_plan: Callable[[], tuple] | None = None, real_rows: torch.Tensor | None = None,
                 max_prompt_tokens: int = 0, host_kv: HostKVTiers | None = None,
                 staging: HostKVStaging | None = None) -> None:
        if capacity < 0:
            raise ValueError(f"cuda_graph_cache_size must be 0 (every warm-up layout) or more, got {capacity}")
        self.model, self.inputs = model, inputs
        # beyond its layout, which graph a step may replay (a model's own condition, e.g. QSA's budget)
        self.graph_variant = getattr(model, "graph_variant", lambda scheduled: "")
        self.warm_variants = tuple(getattr(model, "warm_graph_variants", lambda: ())())
        self.host_plan = host_plan or (lambda: (0, frozenset(), frozenset()))
        # a device scalar the forward reads (routing statistics skip padding rows): each step copies
        # the real row count into it, 0 while warming up and capturing on padding only
        self.real_rows = real_rows
        self.kv_caches, self.state_caches = kv_caches, state_caches
        assert (host_kv is not None) == inputs.host_tier, "graphs read a host KV tier iff their inputs carry one"
        self.host_kv = host_kv
        self.staging = staging  # graphs then read its ring; the runner replays only steps that fit it
        # a pipeline stage's graphs hold its own layers; the activations cross around each replay
        self.stage = getattr(model, "stage", None)
        if self.stage is not None:
            self.stage.graph_rows = inputs.max_tokens
        # verification windows of hybrid models record the recurrent state after every token: one set
        # of buffers for the largest layout, shared by every graph
        max_tokens = max_slots * max_tokens_per_slot
        self.window_buffers = {
            layer: (conv.new_empty(max_tokens, *conv.shape[1:]), ssm.new_empty(max_tokens, *ssm.shape[1:]))
            for layer, (conv, ssm) in state_caches.items()} if max_tokens_per_slot > 1 else {}
        self.ladder = tuple(s for s in SLOT_LADDER if s < max_slots) + (max_slots,)
        self.max_tokens_per_slot = max_tokens_per_slot
        self.verify = VerifyGraphs(inputs, state_caches, max_slots, max_tokens_per_slot, inputs.device_flat.device,
                                   self.capture_graph) if max_tokens_per_slot > 1 else None
        # fresh prompts up to this many tokens replay graphs (0: never): see prompt_token_limit
        assert max_prompt_tokens == prompt_token_limit(max_prompt_tokens, max_prompt_tokens)
        self.max_prompt_tokens = max_prompt_tokens
        assert inputs.max_tokens >= self.prompt_rows, "the graph inputs must hold the largest prompt layout"
        # prompts per multi-prompt graph: powers of two below the slot count, then the slot count, as the
        # rows a graph holds allow
        counts = [p for p in powers_of_two(1, max_slots) if p < max_slots] + [max_slots]
        self.prompt_counts = tuple(p for p in counts if p * MIN_PROMPT_LAYOUT <= self.prompt_rows)
        self.capacity = capacity or len(self.ladder_keys()) + (MIXED_GRAPH_ROOM if max_prompt_tokens else 0)
        self.graphs: OrderedDict[Layout, CapturedStep] = OrderedDict()
        self.eager_only: set[Layout] = set()
        self.pool = None  # one memory pool shared by every graph, made at the first capture
        # decode and verify layouts' LM heads write here ([head_rows(), V] float32, made at the first such
        # capture): one buffer for every layout, since steps replay one at a time and sample before the next
        self.head_logits: torch.Tensor | None = None
        self.num_captures = self.num_evictions = self.num_replays = self.num_head_replays = 0
        self.capture_seconds = 0.0  # wall time spent capturing, so step timings can leave it out

    def ensure(self, key: Layout) -> bool:
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

    def run(self, key: Layout, scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]],
            feed: torch.Tensor | None = None, shift: torch.Tensor | None = None,
            part: StepPart | None = None) -> GraphStep | None:
        """Replay (capturing first if needed) the graph of `key` on this step; None if it cannot be
        captured. `feed` [R]: device token ids that replace the first R rows' input ids. `shift` [S]: each
        slot's window moved by that many positions on the device (GraphInputs.shift). Under a pipeline split the
        activations cross around the replay, one message each way; with `part` (`scheduled` is one part of a
        step replayed as several) they are the step's, received and sent once by the caller."""
        # re-placed experts, or a layer that now needs the host where the graph runs through: capture again
        if not self.ensure(key):
            return None
        captured = self.graphs[key]
        num_slots, n = key[:2]
        host_tables = self._step_host_tables(scheduled)
        self.inputs.fill(scheduled, block_tables, num_slots, n, host_tables)
        if feed is not None:
            self.inputs.feed_input_ids(feed)
        if shift is not None:
            self.verify.shift(captured, num_slots, n, shift)
        if self.staging is not None:
            self.staging.start()  # behind the inputs' uploads
        real = sum(w.num_new_tokens for w in scheduled)
        if self.stage is not None:
            starts = part.plan_starts if part is not None else \
                list(itertools.accumulate((w.num_new_tokens for w in scheduled[:-1]), initial=0))
            runs = graph_row_runs(starts, [w.num_new_tokens for w in scheduled], n)
            self.stage.receive_for_graph(runs, num_slots * n, part.received if part is not None else None)
        captured.graph.replay(real)
        if self.stage is not None:
            self.stage.send_from_graph(captured.stage_outputs, runs, part.outputs if part is not None else None)
        if self.staging is not None:
            self.staging.end()
        self.num_replays += 1
        input_ids, ctx = self.inputs.context(len(scheduled), n, self.kv_caches, self.state_caches,
                                             bool(captured.window_states), _states_of_rows(captured, real),
                                             scheduled, self._host_caches(), host_tables, self.staging)
        logits = None
        if captured.head is not None:
            def logits(head=captured.head, rows=len(scheduled) * n) -> torch.Tensor:
                head.replay()
                self.num_head_replays += 1
                return self.head_logits[:rows]
        # slot i's rows start at i * n (a fresh prompt's padding rows follow its own real rows)
        return GraphStep(input_ids, captured.hidden[:len(scheduled) * n], ctx, logits)

    def run_mixed(self, key: Layout, windows: list[ScheduledSlot], prompts: list[ScheduledSlot],
                  block_tables: dict[int, list[int]]) -> tuple[GraphStep, list[int]] | None:
        """Replay (capturing first if needed) the mixed layout `key` on a step's windows and fresh prompts: the step
        seen through the layout's rows (its padding included: hidden [T_pad, D]) and each slot's first row there,
        windows then prompts; None if it cannot be captured. The context's window states are the windows' rows,
        which come first, as in a step of windows alone."""
        if not self.ensure(key):
            return None
        captured = self.graphs[key]
        (num_windows, n, (num_prompts, length)), rows = key, slot_rows(key)
        slots = windows + [None] * (num_windows - len(windows)) + prompts + [None] * (num_prompts - len(prompts))
        host_tables = self._step_host_tables(windows + prompts)
        self.inputs.fill_rows(slots, rows, block_tables, host_tables)
        if self.staging is not None:
            self.staging.start()
        captured.graph.replay(sum(w.num_new_tokens for w in windows + prompts))
        if self.staging is not None:
            self.staging.end()
        self.num_replays += 1
        input_ids, ctx = self.inputs.context(0, 0, self.kv_caches, self.state_caches, bool(captured.window_states),
                                             _states_of_rows(captured, len(windows) * n), slots, self._host_caches(),
                                             host_tables, self.staging, rows=rows)
        starts = [i * n for i in range(len(windows))] + [num_windows * n + j * length for j in range(len(prompts))]
        return GraphStep(input_ids, captured.hidden, ctx), starts

    def verdicts(self, key: Layout, num_real: int, accepted_in: list[int] | None) -> Verdicts | None:
        """A verification step planned ahead whose layout `key` was just replayed and its LM head too: the real
        slots' verdicts, their recurrent states rolled back, as graphs (runner/verify_graphs.py); None where the
        layout has no head graph (the caller runs them eagerly)."""
        captured = self.graphs.get(key)
        if captured is None or captured.head is None or self.verify is None:
            return None
        return self.verify.verdicts(captured, key, self.head_logits, accepted_in).real(num_real)

    def num_warm_up_keys(self) -> int:
        return len(self.ladder_keys()[:self.capacity])

    def warm_up(self, advance: Callable[[], None] = lambda: None) -> int:
        """Capture the layouts decoding will use before any request arrives (as many as the cache
        holds, in `ladder_keys` order), so no request waits for a capture; `advance` is called after each
        layout. Returns the number captured."""
        captured = 0
        for key in self.ladder_keys()[:self.capacity]:
            if key not in self.graphs and self._capture(key) is not None:
                captured += 1
            advance()
        return captured

    @property
    def pool_bytes(self) -> int:
        return sum(c.pool_bytes for c in self.graphs.values())

    def _capture(self, key: Layout) -> CapturedStep | None:
        while len(self.graphs) >= self.capacity:
            self._release(next(iter(self.graphs)))
            self.num_evictions += 1
        if not self.graphs:
            # a pool whose every graph was reset is freed by torch's allocator: capture into a new one
            self.pool = None
        num_slots, n = key[:2]
        mixed = prompts_beside(key) is not None
        # (a mixed layout's prompts keep none: the recurrent layers keep the leading windows' alone)
        keep_window_states = bool(self.state_caches) and 1 < n <= self.max_tokens_per_slot  # not for prompts
        reserved_before = torch.cuda.memory_reserved()
        try:
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            scratch = ForwardScratch(window_buffers=self.window_buffers)
            if mixed:  # padding only: scratch KV block and state row
                rows = slot_rows(key)
                num_slots = len(rows)
                self.inputs.fill_rows([None] * num_slots, rows, {})
                input_ids, ctx = self.inputs.context(0, 0, self.kv_caches, self.state_caches, keep_window_states,
                                                     scratch, host_kv_caches=self._host_caches(),
                                                     kv_staging=self.staging, rows=rows)
            else:
                self.inputs.fill([], {}, num_slots, n)
                input_ids, ctx = self.inputs.context(num_slots, n, self.kv_caches, self.state_caches,
                                                     keep_window_states, scratch, host_kv_caches=self._host_caches(),
                                                     kv_staging=self.staging)
            if layout_variant(key):
                ctx = dataclasses.replace(ctx, graph_variant=layout_variant(key))
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with self._stage_layers(), torch.cuda.stream(stream):  # warm-up: compiles kernels, sizes workspaces
                self._forward(num_slots, input_ids, ctx)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            scratch.reset(keep_derived=True)
            host_plan = self.host_plan()
            with self._stage_layers(), SplitCapture(self.pool) as capture:
                hidden = self._forward(num_slots, input_ids, ctx)
            torch.cuda.synchronize()  # surfaces capture errors here, not in a later step
        except Exception:
            logger.exception("capturing the CUDA graph for layout %s failed; it runs eagerly", key)
            self.eager_only.add(key)
            self._abandon_pool()
            return None
        head = self._capture_head(hidden) if n <= self.max_tokens_per_slot and not mixed else None
        captured = CapturedStep(capture.result, hidden, dict(scratch.window_states),
                                max(0, torch.cuda.memory_reserved() - reserved_before), host_plan, dict(scratch.derived),
                                head, stage_outputs=self.stage.graph_outputs if self.stage is not None else None)
        self.graphs[key] = captured
        self.num_captures += 1
        return captured

    def head_rows(self) -> int:
        """Rows of the shared logits buffer: a layout of more token rows keeps its LM head eager."""
        return min(HEAD_GRAPH_MAX_ROWS, self.ladder[-1] * self.max_tokens_per_slot)

    def _capture_head(self, hidden: torch.Tensor) -> torch.cuda.CUDAGraph | None:
        """A decode or verify layout's LM head (model.compute_logits on its hidden [S * n, D]) as a graph of its
        own, replayed only when the runner samples from it (a part of a split step does not): one replay in
        place of the head's eager launches, whose host cost a short step does not hide. None (and the head
        runs eagerly) for a model without a head here (a pipeline stage before the last), more rows than
        head_rows, a head that would be copied to read them (model.logits_read_in_place), a failed capture, or
        STRATA_NO_HEAD_GRAPHS=1 (to compare)."""
        compute_logits = getattr(self.model, "compute_logits", None)
        rows = hidden.shape[0]
        if (compute_logits is None or (self.stage is not None and not self.stage.is_last) or rows > self.head_rows()
                or debug_flag("NO_HEAD_GRAPHS")
                or not self.model.logits_read_in_place(rows)):
            return None
        if self.head_logits is None:
            self.head_logits = torch.empty(self.head_rows(), self.model.config.vocab_size, dtype=torch.float32,
                                           device=hidden.device)
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up: compiles the head's kernels
                compute_logits(hidden)
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
        except Exception:
            logger.exception("the LM head of %d rows failed before its capture; it runs eagerly", rows)
            return None
        return self.capture_graph(lambda: self.head_logits[:rows].copy_(compute_logits(hidden)),
                                  f"the LM head graph of {rows} rows", timed=False)  # _capture's time holds it

    def capture_graph(self, fn: Callable[[], object], what: str, timed: bool = True) -> torch.cuda.CUDAGraph | None:
        """fn's launches (kernels compiled already) as one graph in the shared pool; None, logged, if the capture
        fails (the caller runs fn eagerly). Its wall time counts in capture_seconds when `timed`."""
        started = time.perf_counter()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with collector_held():
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.graph(graph, pool=self.pool, stream=stream):
                    fn()
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()
        except Exception:
            logger.exception("capturing %s failed; it runs eagerly", what)
            self._abandon_pool()
            graph = None
        if timed:
            self.capture_seconds += time.perf_counter() - started
        return graph

    def _abandon_pool(self) -> None:
        """After a failed capture: CUDA ended it without torch's allocator learning so (its pool stays
        "recording"), so later captures go to a new pool; the graphs of the old one keep it alive."""
        self.pool = None
        torch.cuda.synchronize()

    def _stage_layers(self):
        """A pipeline stage's capture and its warm-up: no message crosses (Stage.capturing_layers)."""
        return self.stage.capturing_layers() if self.stage is not None else contextlib.nullcontext()

    def _forward(self, num_slots: int, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        self.inputs.derive_flags(num_slots)
        if self.real_rows is not None:
            self.real_rows.copy_(self.inputs.num_real_rows)
        return self.model(input_ids, ctx)

    def _host_caches(self) -> dict | None:
        if self.staging is not None:
            return self.staging.view
        return None if self.host_kv is None else self.host_kv.caches

    def _host_tables(self) -> dict[int, list[int]] | None:
        return None if self.host_kv is None else self.host_kv.tables

    def _step_host_tables(self, scheduled: list[ScheduledSlot]) -> dict[int, list[int]] | None:
        """The replayed slots' host blocks: the tier's tables, or with staging their ring rows (begun here)."""
        host_tables = self._host_tables()
        if self.staging is not None:
            host_tables = self.staging.begin(scheduled, host_tables)
            assert host_tables is not None, "a step replays with staging only when its host blocks fit the ring"
        return host_tables

    def _release(self, key: Layout) -> None:
        captured = self.graphs.pop(key)
        captured.graph.reset()
        for graph in (captured.head, captured.shift_graph, *(tail.graph for tail in captured.verify_tails.values())):
            if graph is not None:
                graph.reset()
        logger.debug("released CUDA graph %s", key)


def _states_of_rows(captured: CapturedStep, rows: int) -> ForwardScratch:
    """A replay's scratch: the per-token states the graph recorded, seen through its first `rows` (the real
    windows'); nothing else of the capture's scratch."""
    return ForwardScratch(window_states={layer: (conv[:rows], ssm[:rows])
                                         for layer, (conv, ssm) in captured.window_states.items()})


def _still_valid(captured: tuple, now: tuple) -> bool:
    """Plans are (epoch, layers split at, layers whose device experts were skipped)."""
    return captured[0] == now[0] and now[1] <= captured[1] and captured[2] <= now[2]
