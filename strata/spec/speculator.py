"""Speculative decoding seen from the runner: one object, one call per step.

After a step's forward, `step` verifies every sampling slot (a slot without drafts samples its one
token: speculation off is the same path with no drafter), commits the accepted tokens (recurrent-state
rollback, sampler and drafter history) and proposes the next drafts. How many drafts a request gets is
the scheduler's draft planner's decision (spec/planner.py), carried by the plan; this object follows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from strata.config import SpecConfig
from strata.sample import Sampler
from strata.spec.commit import commit_outcomes
from strata.spec.proposer import ContextBuilder, Proposer
from strata.spec.verify_step import SlotOutcome, sample_and_verify
from strata.types import ScheduledSlot, SlotResult


@dataclass
class SpeculationStep:
    slots: list[SlotResult]
    verify_seconds: float    # sampling, verification and commit
    draft_seconds: float     # proposing the next drafts
    outcomes: list[SlotOutcome]  # what was sampled and accepted (a pipeline's other stages commit it too)
    # slot -> (first prompt position, entries): the step's prompt logprobs (runner; StepResult.prompt_logprobs)
    prompt_logprobs: dict = field(default_factory=dict)


class Speculator:
    def __init__(self, spec: SpecConfig, model, sampler: Sampler, state_caches: dict,
                 build_context: ContextBuilder, seed: int = 0) -> None:
        self.model, self.sampler, self.state_caches = model, sampler, state_caches
        self.drafter = Proposer(spec, model, build_context, seed) if spec.enabled else None

    # ---- slot lifecycle (the runner's _update_slots) ----------------------------------------------

    def add_slot(self, slot_id: int, token_ids: list[int]) -> None:
        if self.drafter is not None:
            self.drafter.add_slot(slot_id, token_ids)

    def remove_slot(self, slot_id: int) -> None:
        if self.drafter is not None:
            self.drafter.remove_slot(slot_id)

    def needs_whole_step(self, scheduled: list[ScheduledSlot]) -> bool:
        """Whether proposing after this step reads every row of its inputs (the MTP head's pass 1),
        known before the forward: a step assembled from several graph replays then needs a whole-step
        context for it."""
        return self.drafter is not None and self.drafter.needs_mtp_forward(scheduled)

    # ---- one step ---------------------------------------------------------------------------------

    def step(self, scheduled: list[ScheduledSlot], query_starts: list[int], input_ids: torch.Tensor,
             hidden: torch.Tensor, ctx, block_tables: dict[int, list[int]],
             window_states: dict | None, logits: Callable[[], torch.Tensor] | None = None) -> SpeculationStep:
        """hidden [T, D] of the whole step -> each sampling slot's tokens and next drafts.
        `window_states`: the per-token recurrent states the step recorded, when it verified drafts on a
        model with recurrent state (else None). `logits`: the step's graph's LM head over every row ([T, V]
        float32), else None: the rows sampled from are computed here."""
        started = time.perf_counter()
        synthetic = self.drafter.synthetic if self.drafter is not None else None
        outcomes = sample_and_verify(self.model, self.sampler, hidden, scheduled, query_starts, synthetic, logits)
        commit_outcomes(outcomes, self.sampler, self.drafter, self.state_caches, window_states)
        verified = time.perf_counter()
        drafts = {}
        if self.drafter is not None:
            drafts = self.drafter.propose(scheduled, query_starts, input_ids, hidden, ctx, outcomes, block_tables)
        slots = [SlotResult(o.slot_id, o.token_ids, o.num_accepted, drafts.get(o.slot_id, []),
                            None if o.logprobs is None else [o.logprobs]) for o in outcomes]
        return SpeculationStep(slots, verified - started, time.perf_counter() - verified, outcomes)

    def commit_decoded(self, slot_id: int, token_id: int) -> None:
        """A token sampled by an overlapped decode step (no drafts, nothing to verify)."""
        commit_outcomes([SlotOutcome(slot_id, [token_id], 0, 0, 0)], self.sampler, self.drafter, self.state_caches,
                        None)
