"""Admission, the Scheduler's side: which waiting request comes next, whether this step holds its free slots empty
(--admission-hold-steps), and taking a slot with the blocks of the request's longest known prefix.
"""

from __future__ import annotations

import dataclasses

from strata.cache.block_allocator import blocks_needed
from strata.scheduler.request_state import RequestState, Status
from strata.spec.policy import expected_tokens
from strata.types import NewSlotData


class Admission:
    """The Scheduler's methods that admit waiting requests (a mixin: they read and change its state)."""

    def _holds_admission(self, in_flight: bool = False) -> bool:
        """--admission-hold-steps H: whether this step leaves its free slots empty, because a running request will
        reach its length limit (max_tokens or the model's length) within the steps the hold has left, so the prompts
        waiting now are admitted together with the next one's in a single step. A request waits at most H steps
        for it; nothing is held while no request runs (the device would idle). `in_flight`: this step is planned
        while the one before it runs (not yet committed), which counts as one more step to end in."""
        hold = self.config.admission_hold_steps
        if not hold or self._held_steps >= hold or not self.running or not self._can_admit():
            return False
        steps_left = hold - self._held_steps
        if not any(self._ends_within(state, steps_left + in_flight) for state in self.running
                   if state.status is Status.RUNNING):
            return False
        self._held_steps += 1
        return True

    def _can_admit(self) -> bool:
        """A request waits and a slot is free for it."""
        return bool(self.waiting) and bool(self.free_slots) and len(self.running) < self.max_running

    def _ends_within(self, state: RequestState, steps: int) -> bool:
        """Whether `state` reaches its length limit within `steps` steps at its expected tokens a step (speculating
        requests emit more than one) and still has tokens to emit after its prompt."""
        if state.num_computed_tokens < state.num_tokens - 1:
            return False  # its prompt is still being read
        per_step = expected_tokens(state.acceptance_ema, state.requested_k) if self.planner.enabled else 1.0
        return state.remaining_output(self.max_model_len) <= steps * per_step

    def _next_waiting(self) -> RequestState:
        if self.config.policy == "shortest-prompt-first":
            state = min(self.waiting, key=lambda s: s.num_tokens)
            self.waiting.remove(state)
            self.waiting.appendleft(state)
        return self.waiting[0]

    def _try_admit(self, state: RequestState, budget: int) -> bool:
        """Give `state` a slot and the blocks of its longest known prefix (cached ones shared, parked
        ones copied back from host RAM, with the checkpoint to restore on hybrid models), if the
        blocks for its first chunk can be had too. With --kv-resident-tokens the prefix's blocks older
        than the window go straight to the host tier (from the device cache or the parked rows)."""
        match = self.prefix.match(state)
        computed = match.num_blocks * self.block_size
        first_chunk = min(state.num_tokens - computed, budget, self.max_step_tokens or budget)
        num_host = self.offload.blocks_due(computed, first_chunk, 0) if self.offload is not None else 0
        kept = match.blocks[num_host:]
        held = [index for kind, index in kept if kind == "device"]
        self.allocator.take(held)
        fresh = blocks_needed(computed + first_chunk + self.lookahead, self.block_size) - num_host - len(held)
        if not self.allocator.can_allocate(fresh):
            self.allocator.free(held)
            return False
        if self.prefix.parked_blocks is not None:
            self.prefix.parked_blocks.pinned.update(match.parked_rows)
        state.host_block_ids = self.offload.host.allocate(num_host) if num_host else []
        for (kind, index), host in zip(match.blocks, state.host_block_ids):
            # read before anything of this plan writes a device block (the runner's order), so an
            # unheld cached block may be handed out again below
            self._pending_copies["offload_blocks" if kind == "device" else "unpark_blocks"].append((index, host))
        restored = iter(self.allocator.allocate(len(kept) - len(held)))
        tokens = state.all_token_ids()
        block_ids = []
        for i, (kind, index) in enumerate(kept, start=num_host):
            if kind == "device":
                block_ids.append(index)
                continue
            block = next(restored)
            self._pending_copies["restore_blocks"].append((index, block))
            first = i * self.block_size
            self.allocator.register(block, match.hashes[i], tuple(tokens[first:first + self.block_size]))
            block_ids.append(block)
        self.waiting.remove(state)
        state.slot_id = self.free_slots.popleft()
        state.status = Status.RUNNING
        state.block_ids = block_ids
        state.block_hashes = list(match.hashes)
        state.num_computed_tokens = computed
        if state.num_preemptions == 0:
            state.num_cached_tokens = computed
            self.cache_stats.prefix_queries += 1
            self.cache_stats.prefix_hits += int(computed > 0)
        self.stats.prompt_tokens_reused += computed
        self.cache_stats.blocks_restored += len(match.parked_rows)
        self.cache_stats.checkpoints_restored += int(match.checkpoint_host_row is not None)
        self.running.append(state)
        params = state.request.sampling_params
        if params.prompt_logprobs is not None and not state.wants_prompt_logprobs:  # sent before a preemption
            params = dataclasses.replace(params, prompt_logprobs=None)
        self._pending_new.append(NewSlotData(state.request_id, state.slot_id, state.prompt_token_ids,
                                             params, list(state.output_token_ids),
                                             match.checkpoint_row, list(state.block_ids), match.checkpoint_host_row,
                                             list(state.host_block_ids)))
        return True
