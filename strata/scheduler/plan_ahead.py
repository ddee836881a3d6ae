"""Steps planned before the step they follow was read (--async-scheduling): the Scheduler's side. A decode
step's successor gets each request's next position, fed on the device the token in flight; a step of equal
verification windows' successor starts as if every draft were accepted (the runner moves it back). Each says
None where the next step cannot be known in advance, and the step then runs as usual.
"""

from __future__ import annotations

from strata.cache.block_allocator import blocks_needed
from strata.scheduler.request_state import RequestState
from strata.types import ScheduledSlot, StepPlan


class PlanAhead:
    """The Scheduler's methods that plan a step ahead (a mixin: they read and change its state)."""

    def schedule_ahead(self, plan: StepPlan, hold: bool = False) -> StepPlan | None:
        """The next decode step, planned while `plan` (one sampled token per slot, not yet committed)
        still runs: each request of `plan` that may emit another token gets the next position, its
        input being the token `plan` samples (the runner feeds it on the device; token_ids holds a
        placeholder). `hold` (batch groups): its slots are in flight until it is updated, as a scheduled
        step's are. None when the next step cannot be known in advance: a request waits to be admitted (and
        no admission hold keeps it waiting), a running one is neither in `plan` nor in another step in flight,
        a request drafts (in `plan` or, by the draft policy, in the next step: speculating requests that draft
        nothing decode ahead too), sampling needs the previous token on the host (penalties, min_tokens, a
        seed, logprobs, a grammar), or a block would have to be taken from another request. A hybrid model's
        checkpoint due where `plan` ends a block is queued here, ahead of the commit."""
        self._begin_planning()
        continuing = self._continuing_after(plan)
        if not continuing:
            return None
        # blocks up to the next position (the one after the token in flight)
        missing = [max(blocks_needed(state.num_computed_tokens + 2, self.block_size) - state.num_blocks, 0)
                   for state in continuing]
        if not self.allocator.can_allocate(sum(missing)) or self._admission_due():
            return None
        scheduled = []
        for state, count in zip(continuing, missing):
            # hybrid models: a checkpoint due where `plan` ends a block is saved at the start of the
            # ahead step (stream order: after `plan`, before the step that advances the state again)
            self._maybe_checkpoint(state, ahead=True)
            position = state.num_computed_tokens + 1
            offloaded = self._offload(state, 2)  # the token in flight and the next one (its computed blocks only)
            new_blocks = self.allocator.allocate(count) if count else []
            state.block_ids.extend(new_blocks)
            scheduled.append(ScheduledSlot(slot_id=state.slot_id, num_computed_tokens=position, num_new_tokens=1,
                                           new_block_ids=new_blocks, token_ids=[0], offloaded_host_ids=offloaded))
        if hold:
            self.in_flight.update(work.slot_id for work in scheduled)
        return self._make_plan(scheduled)

    def decodes_ahead(self, plan: StepPlan) -> bool:
        """Whether the step after `plan` could be planned while `plan` runs (see schedule_ahead)."""
        return bool(self._continuing_after(plan))

    def verifies_ahead(self, plan: StepPlan) -> bool:
        """Whether `plan` is a step of equal verification windows whose successor may be planned before it is
        read (schedule_verify_ahead): every running request verifies drafts in it, none needs its sampled
        history on the host, nothing waits to be admitted (or an admission hold keeps it waiting)."""
        return self._verifying(plan) is not None

    def schedule_verify_ahead(self, plan: StepPlan) -> StepPlan | None:
        """The verification step after `plan` (launched, not yet read), planned as if `plan` accepted every
        draft: each window starts 1 + k positions on (the runner moves it back by the shortfall on the device,
        spec/verify_ahead.py), with blocks for both windows. None when it cannot be known in advance: see
        verifies_ahead; a request's next window could pass the model's length, or (windows not kept uniform) the
        request may end in `plan`; the draft policy gives the requests different or no drafts next; blocks are
        short."""
        self._begin_planning()
        pairs = self._verifying(plan)
        if pairs is None:
            return None
        window = plan.scheduled[0].num_new_tokens
        # one k for every window, and the one `plan` drafted for (an MTP head drafted its next_k on the device)
        k = {self._draft_length(state) for state, _ in pairs} | {work.next_k for _, work in pairs}
        if len(k) != 1 or not 0 < (k := k.pop()) or len(pairs) * (1 + k) > self.config.max_num_batched_tokens:
            return None
        needed = []
        for state, work in pairs:
            if self.max_step_tokens or state.num_tokens + window + 1 + k > self.max_model_len:
                return None  # the next window could pass the model's length
            # a request that may end in `plan` (or whose next window passes max_tokens) takes a whole window where
            # stepping one at a time would give it one too (uniform windows, filler drafts: CUDA graphs), so the
            # device is not left idle while the host reads `plan`; tokens past its end are dropped at commit
            if not self.uniform_draft_windows and state.remaining_output(self.max_model_len) - window < 1 + k:
                return None
            ahead = state.num_computed_tokens + window
            needed.append(max(blocks_needed(ahead + 1 + k + self.lookahead, self.block_size) - state.num_blocks, 0))
        if not self.allocator.can_allocate(sum(needed)) or self._admission_due():
            return None
        scheduled, boundary_saves = [], []
        for (state, _), count in zip(pairs, needed):
            new_blocks = self.allocator.allocate(count) if count else []
            state.block_ids.extend(new_blocks)
            state.requested_k = k
            start = state.num_computed_tokens + window  # as if `plan` accepted every draft
            scheduled.append(ScheduledSlot(slot_id=state.slot_id, num_computed_tokens=start,
                                           num_new_tokens=1 + k, new_block_ids=new_blocks,
                                           token_ids=[0] * (1 + k), draft_token_ids=[0] * k, next_k=k, drafting=True))
            boundary_saves += self._boundary_save(state, start, window)
        ahead_plan = self._make_plan(scheduled)
        ahead_plan.boundary_saves = boundary_saves
        self._ahead_windows = (ahead_plan.step_id, {w.slot_id: w.num_new_tokens for w in scheduled})
        return ahead_plan

    def _boundary_save(self, state: RequestState, start: int, window: int) -> list[tuple[int, int, int, int]]:
        """A decoding hybrid's checkpoint for a step planned ahead: its window really starts `window` - 1 to 0
        positions before `start` (as the step in flight accepts), so a block boundary there gets a checkpoint row,
        saved on the device if the window starts on it and named by `settle_boundary_save` when the host reads
        the step in flight (else freed) -> [(slot, row, start, boundary)] or []."""
        boundary = start // self.block_size * self.block_size
        if boundary <= start - window or boundary <= len(state.prompt_token_ids) \
                or not self.prefix.saves_checkpoints(state):
            return []
        row = self.checkpoints.reserve_unnamed()
        if row is None:
            return []
        self._boundary_rows[state.slot_id] = (row, boundary)
        return [(state.slot_id, row, start, boundary)]

    def settle_boundary_save(self, state: RequestState | None, slot_id: int) -> None:
        """After the step before the one planned with a boundary save was committed: name the checkpoint row if
        the slot's computed length (where the next window starts) is the boundary, else free it."""
        pending = self._boundary_rows.pop(slot_id, None)
        if pending is None:
            return
        row, boundary = pending
        index = boundary // self.block_size - 1  # the block that ends at the boundary
        if state is None or state.num_computed_tokens != boundary or len(state.block_hashes) <= index:
            self.checkpoints.release_unnamed(row)
            return
        key = state.block_hashes[index]
        if self.checkpoints.name(row, key):
            if state.decode_checkpoint_key is not None:  # decoding: keep only the newest
                self.checkpoints.release(state.decode_checkpoint_key)
            state.decode_checkpoint_key = key
            self.cache_stats.checkpoints_saved += 1

    def _verifying(self, plan: StepPlan) -> list[tuple[RequestState, ScheduledSlot]] | None:
        """(request, window) of each running request's slot of `plan` when it is a step of equal verification
        windows of every running request (and of requests that ended in the step before it, left out), sampled
        without history and with nothing to admit next (see _admits_next); else None."""
        if self._admits_next() or plan.new_slots or not plan.scheduled or self.offload is not None:
            return None
        by_slot = {state.slot_id: state for state in self.running}
        window = plan.scheduled[0].num_new_tokens
        if not by_slot.keys() <= {work.slot_id for work in plan.scheduled} or window < 2:
            return None
        pairs = []
        for work in plan.scheduled:
            state = by_slot.get(work.slot_id)
            if state is None:
                continue  # ended in the step before `plan` (its slot stays empty: nothing can be admitted)
            if not work.sample or work.num_new_tokens != window or len(work.draft_token_ids) != window - 1 \
                    or not _samples_without_history(state):
                return None
            pairs.append((state, work))
        return pairs or None

    def _admits_next(self) -> bool:
        """Whether the step after the one being planned from may admit a waiting request, so the host must read
        first: one waits, a slot is free for it, and no admission hold runs (--admission-hold-steps). With every
        slot taken, steps go on ahead: a slot freed by a request ending in the step in flight takes a waiting
        request one step later."""
        return self._can_admit() and not self._held_steps

    def _admission_due(self) -> bool:
        """_admits_next for the step being planned ahead, whose hold is decided here (a held step counts)."""
        return self._can_admit() and not self._holds_admission(in_flight=True)

    def _continuing_after(self, plan: StepPlan) -> list[RequestState] | None:
        """The requests of decode step `plan` (not yet committed) that continue after it, when every
        condition of schedule_ahead but the free blocks holds; else None."""
        if self._admits_next() or plan.new_slots or not plan.scheduled:
            return None
        by_slot = {state.slot_id: state for state in self.running}
        in_plan = {work.slot_id for work in plan.scheduled}
        if any(slot_id not in in_plan and slot_id not in self.in_flight for slot_id in by_slot):
            return None  # it would wait while the requests of `plan` go on ahead
        continuing = []
        for work in plan.scheduled:
            state = by_slot.get(work.slot_id)
            if state is None:
                continue  # ended in the step before `plan`
            if not work.sample or work.num_new_tokens != 1 or work.draft_token_ids \
                    or state.num_computed_tokens != work.num_computed_tokens or not _samples_without_history(state) \
                    or (self.planner.enabled and (work.next_k or self._draft_length(state))):
                return None
            if state.remaining_output(self.max_model_len) > 1:  # else the token in flight is its last
                continuing.append(state)
        return continuing


def _samples_without_history(state: RequestState) -> bool:
    """Whether the request's next token can be sampled before its previous one is read back: no
    penalties, no per-position seed, no logprobs to return, no grammar (its next mask follows the token in
    flight), a reasoning budget only where the token in flight cannot change what it forces or bans next
    (ThinkingBudget.can_decode_ahead), and min_tokens already reached (the sampler's count lags by the token in
    flight)."""
    params = state.request.sampling_params
    return (params.repetition_penalty == 1.0 and params.presence_penalty == 0.0 and params.frequency_penalty == 0.0
            and params.seed is None and params.logprobs is None and params.structured_outputs is None
            and (state.thinking is None or state.thinking.can_decode_ahead())
            and len(state.output_token_ids) >= params.min_tokens)
