"""The draft planner: the one place that decides how many drafts a request gets next step.

The scheduler asks it once per request and step (`drafts_for`); the plan carries the answer to the
runner and the drafter (`ScheduledSlot.next_k`), which never decide it themselves. It holds the
batch-wide state of that decision: the step-time cost model (spec/policy.py), its choice for the step
being planned, and the running acceptance estimate new requests start from. Pure Python: the scheduler
imports it, and the scheduler loads no torch.
"""

from __future__ import annotations

from strata.config import SpecConfig
from strata.spec.policy import DraftCostModel, can_speculate, draft_length, recover_acceptance, update_acceptance
from strata.types import SamplingParams


class DraftPlanner:
    def __init__(self, spec: SpecConfig) -> None:
        self.spec = spec
        self.cost = DraftCostModel()   # step time vs tokens per step: picks the batch draft length
        self.acceptance_prior = 1.0    # acceptance over all verifications: where a new request's estimate starts
        self._k_step: int | None = None

    @property
    def enabled(self) -> bool:
        return self.spec.enabled

    @property
    def lookahead(self) -> int:
        """Positions past a verified window whose KV the drafter writes (the MTP head's k - 1 passes)."""
        return self.spec.num_speculative_tokens if self.spec.uses_mtp else 0

    def begin_step(self, acceptances: list[float]) -> None:
        """Before a step is planned: the batch's draft length from the running requests' acceptance
        estimates (none running: a batch of one new request). Every planned step decides, ahead-planned
        ones too, so the cost model's retries of unmeasured lengths keep their clock."""
        self._k_step = None
        if self.spec.enabled and self.spec.adaptive:
            self._k_step = self.cost.best_k(self.spec.num_speculative_tokens, acceptances or [self.acceptance_prior])

    def may_draft(self, params: SamplingParams, num_output_tokens: int) -> bool:
        """Whether the request's sampling lets it verify drafts now (no penalties, logprobs or unmet
        min_tokens, which need the exact per-position history)."""
        return self.spec.enabled and can_speculate(params, num_output_tokens)

    def drafts_for(self, params: SamplingParams, num_output_tokens: int, acceptance_ema: float,
                   num_running: int) -> int:
        """Drafts the request gets for its next step (0: it decodes plainly)."""
        if not self.may_draft(params, num_output_tokens):
            return 0
        return draft_length(self.spec.num_speculative_tokens, self.spec.adaptive, num_running, acceptance_ema,
                            self._k_step)

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        """A decode-only step's wall time, host work included (every slot sampled its window): feeds the
        cost model."""
        self.cost.observe(num_tokens, seconds)

    def acceptance_after(self, acceptance_ema: float, num_drafts: int, num_accepted: int) -> float:
        """A request's new acceptance estimate after a step with `num_drafts` drafts (0: a plain step,
        which lets the estimate recover); verifications also move the engine-wide prior."""
        if num_drafts:
            self.acceptance_prior = update_acceptance(self.acceptance_prior, num_drafts, num_accepted)
            return update_acceptance(acceptance_ema, num_drafts, num_accepted)
        return recover_acceptance(acceptance_ema) if self.spec.enabled else acceptance_ema
