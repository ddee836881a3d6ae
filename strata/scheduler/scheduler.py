"""The scheduler: admits requests into slots, gives every running slot its `num_new_tokens` for the
step under one token budget, and commits the runner's results.

There are no phases: each running request catches `num_computed_tokens` up to its token count, so a
prompt chunk and a decode step are the same thing. Invariant: a running request holds exactly
`blocks_needed(num_computed_tokens + scheduled)` blocks after `schedule()`.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass

from strata.cache.block_allocator import BlockAllocator, blocks_needed
from strata.cache.checkpoints import CheckpointIndex
from strata.cache.host_park import ParkIndex
from strata.config import CacheConfig, SchedulerConfig, SpecConfig
from strata.reasoning import ThinkingBudget, ThinkingTokens
from strata.scheduler.admission import Admission
from strata.scheduler.kv_offload import KVOffload
from strata.scheduler.pins import PinnedPrefixes
from strata.scheduler.plan_ahead import PlanAhead
from strata.scheduler.prefix import PrefixManager
from strata.scheduler.request_state import RequestState, Status
from strata.scheduler.stats import CacheStats, SpecStats
from strata.spec.planner import DraftPlanner
from strata.types import FinishReason, NewSlotData, PromptEntry, Request, ScheduledSlot, StepPlan, StepResult


@dataclass
class Commit:
    """What one request gained in a step (input to the engine's output processing)."""

    state: RequestState
    new_token_ids: list[int]
    logprobs: list[dict[int, float]] | None
    finish_reason: FinishReason | None
    prompt_logprobs: list[PromptEntry | None] | None = None  # with a request's first tokens, if it asked


class Scheduler(Admission, PlanAhead):
    def __init__(self, config: SchedulerConfig, cache: CacheConfig, num_blocks: int, max_model_len: int,
                 eos_token_ids: tuple[int, ...], planner: DraftPlanner | None = None,
                 has_recurrent_state: bool = False, park_rows: tuple[int, int] = (0, 0),
                 uniform_draft_windows: bool = False, expert_token_budget: int | None = None,
                 num_host_kv_blocks: int = 0) -> None:
        """planner: how many drafts each request gets (None: no speculation). park_rows: host-RAM rows
        of the conversation cache for (KV blocks, checkpoints). uniform_draft_windows: fill every window
        of a step to one length (the runner replays CUDA graphs, keyed by window length).
        expert_token_budget: most tokens per step (--expert-budget with offloaded experts).
        num_host_kv_blocks: the host tier's blocks with --kv-resident-tokens (kv_offload.py)."""
        self.config = config
        self.planner = planner or DraftPlanner(SpecConfig())
        self.lookahead = self.planner.lookahead  # KV the drafter writes past a verified window
        self.stats = SpecStats()
        self.uniform_draft_windows = uniform_draft_windows
        self.expert_token_budget = expert_token_budget
        self.block_size = cache.block_size
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids
        self.allocator = BlockAllocator(num_blocks, cache.enable_prefix_caching)
        self.offload = KVOffload(self.allocator, num_host_kv_blocks, cache.block_size, cache.kv_resident_tokens) \
            if cache.kv_offload else None
        # prompt chunks and verification windows of at most the resident window (kv_offload.py)
        self.max_step_tokens = cache.kv_resident_tokens or None
        self.checkpoints = CheckpointIndex(cache.checkpoint_pool_size) if has_recurrent_state else None
        parked_blocks = ParkIndex(park_rows[0]) if park_rows[0] and cache.enable_prefix_caching else None
        parked_checkpoints = ParkIndex(park_rows[1]) if park_rows[1] and self.checkpoints is not None else None
        self.prefix = PrefixManager(self.allocator, cache.block_size, self.checkpoints, cache.checkpoint_every,
                                    parked_blocks, parked_checkpoints)
        pin_blocks = num_blocks // 2 if cache.pin_max_tokens is None else cache.pin_max_tokens // cache.block_size
        self.prefix.pins = PinnedPrefixes(self.allocator, pin_blocks, cache.pin_ttl_s, self.checkpoints)
        self.cache_stats = CacheStats()
        if parked_blocks is not None:
            self.allocator.on_evict = self._park_block
        if parked_checkpoints is not None:
            self.checkpoints.on_evict = self._park_checkpoint
        self.thinking_tokens: ThinkingTokens | None = None  # set by the engine (reasoning budgets)
        self.free_slots = deque(range(config.max_num_seqs))
        self.max_running = config.max_num_seqs  # set_max_num_seqs lowers it (a benchmark's concurrency)
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.requests: dict[str, RequestState] = {}
        # batch groups: slots of steps planned and not yet updated (a count: a decode step planned ahead holds
        # its slots while the step it follows still does)
        self.in_flight: Counter[int] = Counter()
        # a verification step planned ahead and not yet updated: its step id and each slot's window
        self._ahead_windows: tuple[int, dict[int, int]] = (-1, {})
        self._boundary_rows: dict[int, tuple[int, int]] = {}  # slot -> (unnamed checkpoint row, block boundary)
        self._draining: set[int] = set()  # slots of ended requests whose step is still in flight
        self._pending_new: list[NewSlotData] = []
        self._pending_freed: list[int] = []
        self._pending_truncated: dict[int, int] = {}
        self._pending_saves: list[tuple[int, int]] = []
        self._pending_copies: dict[str, list[tuple[int, int]]] = {"park_blocks": [], "restore_blocks": [],
                                                                  "park_checkpoints": [], "offload_blocks": [],
                                                                  "unpark_blocks": []}
        self._step_ids = itertools.count()
        self._held_steps = 0  # steps the waiting prompts were held for (--admission-hold-steps)

    def set_max_num_seqs(self, max_num_seqs: int) -> None:
        """Admit at most this many running requests (1 .. the slots built), e.g. a benchmark's
        concurrency level; requests already running keep their slots."""
        if not 1 <= max_num_seqs <= self.config.max_num_seqs:
            raise ValueError(f"max_num_seqs must be in [1, {self.config.max_num_seqs}] (the slots this engine "
                             f"was built with), got {max_num_seqs}")
        self.max_running = max_num_seqs

    # ---- requests in and out -------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        state = RequestState(request, self.eos_token_ids, acceptance_ema=self.planner.acceptance_prior)
        if request.pin_prefix is False:
            self.prefix.unpin_prompt(request.prompt_token_ids)
        budget = request.sampling_params.thinking_budget
        if budget is not None and self.thinking_tokens is not None:
            state.thinking = ThinkingBudget.start(self.thinking_tokens, budget, request.prompt_token_ids)
        self.requests[request.request_id] = state
        self.waiting.append(state)

    def finish_request(self, request_id: str, reason: FinishReason) -> RequestState | None:
        """Ends a request now (abort, stop string, error): frees its slot and blocks."""
        state = self.requests.pop(request_id, None)
        if state is None:
            return None
        if state.status is Status.WAITING:
            self.waiting.remove(state)
        elif state.status is Status.RUNNING:
            if state.request.pin_prefix:
                self.prefix.pin_prompt(state)
            self.running.remove(state)
            self._release(state)
        state.status, state.finish_reason = Status.FINISHED, reason
        return state

    def recompute_after_failed_restore(self, plan: StepPlan, slot_ids: list[int]) -> None:
        """The runner could not copy cached prefixes back for these slots (and ran nothing): their
        restored blocks are no longer trusted, and the requests start over without the cache."""
        restored = {block for _, block in plan.restore_blocks}
        for state in [s for s in self.running if s.slot_id in slot_ids]:
            for block in restored.intersection(state.block_ids):
                block_hash = self.allocator.forget(block)
                if block_hash is not None and self.prefix.parked_blocks is not None:
                    self.prefix.parked_blocks.forget(block_hash)
            state.skip_prefix_cache = True
            state.num_cached_tokens = 0
            self._preempt(state)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # ---- one step --------------------------------------------------------------------------------

    def schedule(self, max_slots: int | None = None) -> StepPlan:
        """The next step. `max_slots` (batch groups under a pipeline split): a step of at most this many
        slots, leaving out slots whose step is still in flight (planned, not yet updated); its own slots are
        then in flight until `update`."""
        self.prefix.pins.expire()
        budget = self.config.max_num_batched_tokens
        if self.expert_token_budget is not None:  # bound the experts a step touches (offloaded experts)
            budget = min(budget, max(self.expert_token_budget, len(self.running)))
        scheduled: list[ScheduledSlot] = []
        room = max_slots if max_slots is not None else self.config.max_num_seqs
        self._begin_planning()
        for state in list(self.running):
            if budget == 0 or len(scheduled) == room:
                break
            if state.status is not Status.RUNNING or state.slot_id in self.in_flight:
                continue  # preempted earlier in this loop to make room for an older request, or in flight
            num_new = self._chunk(state, budget)
            drafts = self._drafts_for(state, budget) if num_new == 1 and state.output_token_ids else []
            offloaded = self._offload(state, num_new + len(drafts))
            new_blocks = self._try_grow(state, num_new + len(drafts))
            if new_blocks is None:
                continue  # preempted (or waiting for blocks): it is back in the waiting queue
            scheduled.append(self._slot_work(state, num_new, new_blocks, drafts, offloaded))
            budget -= num_new + len(drafts)
        held = self._holds_admission()  # decided once: once admitting, a step fills every free slot it can
        while budget > 0 and self.waiting and self.free_slots and len(self.running) < self.max_running \
                and len(scheduled) < room and not held:
            state = self._next_waiting()
            if not self._try_admit(state, budget):
                break
            self._held_steps = 0
            num_new = self._chunk(state, budget)
            new_blocks = self._try_grow(state, num_new)
            scheduled.append(self._slot_work(state, num_new, new_blocks))
            budget -= num_new
        if max_slots is not None:
            self.in_flight.update(work.slot_id for work in scheduled)
        return self._make_plan(scheduled)

    def _begin_planning(self) -> None:
        self.planner.begin_step([s.acceptance_ema for s in self.running])

    def _draft_length(self, state: RequestState) -> int:
        """Drafts the planner gives the request now. With speculation on, only steps after which no
        request would draft can be planned ahead."""
        return self.planner.drafts_for(state.request.sampling_params, len(state.output_token_ids),
                                       state.acceptance_ema, len(self.running))

    def _make_plan(self, scheduled: list[ScheduledSlot]) -> StepPlan:
        """The step plan of `scheduled` with everything pending for the runner (slots to set up and
        free, truncations, checkpoint saves, cache copies)."""
        plan = StepPlan(next(self._step_ids), self._pending_new, scheduled, self._pending_freed,
                        self._pending_truncated, self._pending_saves, **self._pending_copies)
        self._pending_new, self._pending_freed, self._pending_truncated, self._pending_saves = [], [], {}, []
        self._pending_copies = {name: [] for name in self._pending_copies}
        if self.prefix.parked_blocks is not None:
            self.prefix.parked_blocks.pinned.clear()
        return plan

    def pending_plan(self) -> StepPlan:
        """A plan with no work that carries what is queued for the runner (freed slots, checkpoint saves,
        cache copies): run between steps, it brings the caches up to date with the index."""
        return self._make_plan([])

    def observe_step_time(self, plan: StepPlan, seconds: float) -> None:
        """The wall time of a step from its start to its commits (the engine's; host work included, which a
        verification step does not overlap with the device while a plain one planned ahead does): a
        decode-only step's feeds the draft cost model."""
        if plan.scheduled and all(w.sample and w.num_new_tokens == 1 + len(w.draft_token_ids) for w in plan.scheduled):
            self.planner.observe_step(plan.num_tokens, seconds)

    def land(self, plan: StepPlan) -> None:
        """Batch groups: `plan` is no longer in flight (updated or failed): its slots may be planned again,
        and those of requests that ended meanwhile are free now."""
        for work in plan.scheduled:
            if self.in_flight[work.slot_id] > 1:  # a step planned ahead of this one holds it too
                self.in_flight[work.slot_id] -= 1
                continue
            self.in_flight.pop(work.slot_id, None)
            if work.slot_id in self._draining:
                self._draining.remove(work.slot_id)
                self._pending_freed.append(work.slot_id)
                self.free_slots.append(work.slot_id)

    def update(self, plan: StepPlan, result: StepResult) -> list[Commit]:
        self.land(plan)
        if plan.step_id == self._ahead_windows[0]:
            self._ahead_windows = (-1, {})
        by_slot = {r.slot_id: r for r in result.slots}
        running_by_slot = {s.slot_id: s for s in self.running}
        commits = []
        self.stats.record_step(plan.num_tokens, result.forward_seconds, result.sample_seconds, result.draft_seconds)
        for work in plan.scheduled:
            state = running_by_slot.get(work.slot_id)
            if state is None:
                self.settle_boundary_save(None, work.slot_id)
                continue  # finished or aborted between schedule() and update()
            slot_result = by_slot.get(work.slot_id)
            if work.slot_id in result.expert_pairs:
                state.expert_shares.add(*result.expert_pairs[work.slot_id])
            num_rejected = len(work.draft_token_ids) - (slot_result.num_accepted if slot_result else 0)
            state.num_computed_tokens += work.num_new_tokens - num_rejected
            if work.slot_id in result.prompt_logprobs:
                state.record_prompt_logprobs(*result.prompt_logprobs[work.slot_id])
            if slot_result is None:
                self.prefix.register_computed(state)
                self._maybe_checkpoint(state)
                continue
            if work.draft_token_ids:
                state.spec_stats.record_verification(len(work.draft_token_ids), slot_result.num_accepted)
                self.stats.record_verification(len(work.draft_token_ids), slot_result.num_accepted)
            state.acceptance_ema = self.planner.acceptance_after(state.acceptance_ema, len(work.draft_token_ids),
                                                                 slot_result.num_accepted)
            state.draft_token_ids = slot_result.next_draft_token_ids
            kept, reason = state.append_outputs(slot_result.token_ids, self.max_model_len)
            for token_id in kept if state.thinking is not None else ():
                state.thinking.advance(token_id)
            # after the append: accepted drafts are computed tokens, and their blocks hash their values
            self.prefix.register_computed(state)
            self.settle_boundary_save(state, work.slot_id)  # the step planned ahead of this one may have saved
            logprobs = slot_result.logprobs[: len(kept)] if slot_result.logprobs else slot_result.logprobs
            if work.slot_id not in self._ahead_windows[1]:  # else the state saved would be the step's in flight
                self._maybe_checkpoint(state)
            if reason is not None:
                self.finish_request(state.request_id, reason)
            else:
                self._release_excess_blocks(state)
            commits.append(Commit(state, kept, logprobs, reason, state.take_prompt_logprobs()))
        return commits

    # ---- helpers ---------------------------------------------------------------------------------

    def _park_block(self, block_id: int, block_hash: int, tokens: tuple[int, ...]) -> None:
        row = self.prefix.parked_blocks.try_reserve(block_hash, tokens)
        if row is not None:
            self._pending_copies["park_blocks"].append((block_id, row))
            self.cache_stats.blocks_parked += 1

    def _park_checkpoint(self, key: int, device_row: int) -> None:
        host_row = self.prefix.parked_checkpoints.try_reserve(key)
        if host_row is not None:
            self._pending_copies["park_checkpoints"].append((device_row, host_row))
            self.cache_stats.checkpoints_parked += 1

    def forget_checkpoint_saves(self, plan: StepPlan) -> None:
        """A failed step's checkpoint saves may not have run: their rows must not be found by a later
        prefix match (at worst a good checkpoint is dropped)."""
        if self.checkpoints is None:
            return
        for slot_id, row, _, _ in plan.boundary_saves:
            if self._boundary_rows.get(slot_id, (None,))[0] == row:
                del self._boundary_rows[slot_id]
                self.checkpoints.release_unnamed(row)
        for _, row in plan.checkpoint_saves:
            key = self.checkpoints.release_row(row)
            for state in self.running:
                if key is not None and state.decode_checkpoint_key == key:
                    state.decode_checkpoint_key = None

    def _maybe_checkpoint(self, state: RequestState, ahead: bool = False) -> None:
        """Queue a save of the slot's state for the next plan if a checkpoint is due (see
        PrefixManager.checkpoint_due; `ahead`: for the overlapped step in flight)."""
        key = self.prefix.checkpoint_due(state, ahead)
        if key is None:
            return
        row = self.checkpoints.try_reserve(key)
        if row is None:
            return
        if state.num_computed_tokens + ahead > len(state.prompt_token_ids):  # decoding: keep only the newest
            if state.decode_checkpoint_key is not None:
                self.checkpoints.release(state.decode_checkpoint_key)
            state.decode_checkpoint_key = key
        self._pending_saves.append((state.slot_id, row))
        self.cache_stats.checkpoints_saved += 1

    def _slot_work(self, state: RequestState, num_new: int, new_blocks: list[int],
                   drafts: list[int] | None = None, offloaded: list[int] | None = None) -> ScheduledSlot:
        start = state.num_computed_tokens
        drafts = drafts or []
        sample = start + num_new == state.num_tokens
        k = self._draft_length(state)
        next_k = k if sample else 0
        state.requested_k = next_k
        return ScheduledSlot(slot_id=state.slot_id, num_computed_tokens=start, num_new_tokens=num_new + len(drafts),
                             new_block_ids=new_blocks, token_ids=state.token_range(start, start + num_new) + drafts,
                             draft_token_ids=drafts, sample=sample, next_k=next_k, drafting=k > 0,
                             offloaded_host_ids=offloaded or [])

    def _chunk(self, state: RequestState, budget: int) -> int:
        """The tokens `state` computes next under `budget` (at most the resident window with
        --kv-resident-tokens), ended where prefix reuse wants it (PrefixManager.chunk_length)."""
        num_new = min(state.num_tokens - state.num_computed_tokens, budget, self.max_step_tokens or budget)
        return self.prefix.chunk_length(state, num_new)

    def _offload(self, state: RequestState, num_new: int) -> list[int]:
        """--kv-resident-tokens: move `state`'s blocks older than its window to the host tier before a
        step of `num_new` tokens -> the host blocks they went to (copies queued for the runner)."""
        if self.offload is None:
            return []
        pairs = self.offload.move(state, num_new)
        self._pending_copies["offload_blocks"].extend(pairs)
        return [host for _, host in pairs]

    def _drafts_for(self, state: RequestState, budget: int) -> list[int]:
        """This step's drafts: what the drafter proposed, within the budget and the request's room
        (a window emits at most k + 1 tokens, so k < remaining output)."""
        room = min(budget - 1, state.remaining_output(self.max_model_len) - 1,
                   (self.max_step_tokens or budget) - 1)
        if not self.planner.may_draft(state.request.sampling_params, len(state.output_token_ids)):
            return []
        drafts = state.draft_token_ids[: max(room, 0)]
        # filler drafts (the last token repeated) keep every window of the step the same length, so the
        # step replays a CUDA graph; verifying them is exact like any draft, and tokens accepted past
        # max_tokens are dropped at commit, so only the budget and max_model_len bound them
        wanted = min(state.requested_k, budget - 1, self.max_model_len - state.num_tokens - 1,
                     (self.max_step_tokens or budget) - 1)
        if self.uniform_draft_windows and len(drafts) < wanted:
            drafts = drafts + [(drafts or state.output_token_ids)[-1]] * (wanted - len(drafts))
        return drafts

    def _release_excess_blocks(self, state: RequestState) -> None:
        """After rejected drafts a request may hold blocks past its committed length + lookahead;
        they go back to the pool (their contents are never read)."""
        # (a verification step in flight, planned ahead, writes its window from the committed length on)
        in_flight = self._ahead_windows[1].get(state.slot_id, 1)
        keep = blocks_needed(state.num_computed_tokens + in_flight + self.lookahead, self.block_size)
        if state.num_blocks > keep:
            keep_device = keep - len(state.host_block_ids)  # host blocks lie below the computed length
            self.allocator.free(state.block_ids[keep_device:])
            del state.block_ids[keep_device:]
            self._pending_truncated[state.slot_id] = keep

    def _try_grow(self, state: RequestState, num_new: int) -> list[int] | None:
        """Blocks for `num_new` more tokens (+ the drafter's lookahead); on shortage, preempt the
        newest running request."""
        needed = blocks_needed(state.num_computed_tokens + num_new + self.lookahead,
                               self.block_size) - state.num_blocks
        while not self.allocator.can_allocate(needed):
            # the newest request not in flight (batch groups), else `state` itself waits
            victim = next((s for s in reversed(self.running) if s.slot_id not in self.in_flight), state)
            self._preempt(victim)
            if victim is state:
                return None
        new_blocks = self.allocator.allocate(needed) if needed > 0 else []
        state.block_ids.extend(new_blocks)
        return new_blocks

    def _preempt(self, state: RequestState) -> None:
        """Recompute preemption: drop the KV, keep the tokens; the request re-reads them later."""
        self.running.remove(state)
        self._release(state)
        state.status = Status.WAITING
        state.num_computed_tokens = 0
        state.block_hashes = []
        state.draft_token_ids = []
        state.num_preemptions += 1
        self.waiting.appendleft(state)

    def _release(self, state: RequestState) -> None:
        self._pending_truncated.pop(state.slot_id, None)
        # tail first: least-recently-used eviction then drops a conversation's end before its start,
        # keeping the longest prefix findable
        self.allocator.free(state.block_ids[::-1])
        state.block_ids = []
        if self.offload is not None:
            self.offload.release(state)
        if state.slot_id in self.in_flight:  # batch groups: its step still runs; the slot is free after it
            self._draining.add(state.slot_id)
        else:
            self._pending_freed.append(state.slot_id)
            self.free_slots.append(state.slot_id)
        state.slot_id = None

