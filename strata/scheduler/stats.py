"""Speculation and step counters: one SpecStats for the engine (totals) and one per request."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecStats:
    num_steps: int = 0
    num_scheduled_tokens: int = 0
    num_verify_windows: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    drafts_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    forward_seconds: float = 0.0
    sample_seconds: float = 0.0
    draft_seconds: float = 0.0
    prompt_tokens_reused: int = 0             # prompt tokens served from the prefix / conversation cache

    def record_step(self, num_tokens: int, forward: float = 0.0, sample: float = 0.0, draft: float = 0.0) -> None:
        self.num_steps += 1
        self.num_scheduled_tokens += num_tokens
        self.forward_seconds += forward
        self.sample_seconds += sample
        self.draft_seconds += draft

    def record_verification(self, num_drafts: int, num_accepted: int) -> None:
        self.num_verify_windows += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        grow = num_drafts - len(self.drafts_per_position)
        if grow > 0:
            self.drafts_per_position += [0] * grow
            self.accepted_per_position += [0] * grow
        for j in range(num_drafts):
            self.drafts_per_position[j] += 1
            self.accepted_per_position[j] += int(j < num_accepted)

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verify window, the bonus token included."""
        if not self.num_verify_windows:
            return 0.0
        return 1.0 + self.num_accepted_tokens / self.num_verify_windows

    def acceptance_per_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafts_per_position)]

    def as_dict(self) -> dict:
        return {"num_steps": self.num_steps, "num_scheduled_tokens": self.num_scheduled_tokens,
                "tokens_per_step": self.num_scheduled_tokens / self.num_steps if self.num_steps else 0.0,
                "forward_seconds": self.forward_seconds, "sample_seconds": self.sample_seconds,
                "draft_seconds": self.draft_seconds, "prompt_tokens_reused": self.prompt_tokens_reused,
                "num_verify_windows": self.num_verify_windows, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "mean_accepted_length": self.mean_accepted_length,
                "acceptance_per_position": self.acceptance_per_position()}


@dataclass
class ExpertShares:
    """Where one request's routed (token, k) pairs were computed, with offloaded experts."""

    pairs: int = 0
    cpu_pairs: int = 0
    pcie_pairs: int = 0

    def add(self, pairs: int, cpu: int, pcie: int) -> None:
        self.pairs += pairs
        self.cpu_pairs += cpu
        self.pcie_pairs += pcie

    def as_dict(self) -> dict:
        if not self.pairs:
            return {}
        return {"expert_pairs": self.pairs, "expert_gpu_hit_rate": 1 - (self.cpu_pairs + self.pcie_pairs) / self.pairs,
                "expert_cpu_share": self.cpu_pairs / self.pairs, "expert_pcie_share": self.pcie_pairs / self.pairs}


@dataclass
class CacheStats:
    """Prefix and conversation reuse counters (engine totals)."""

    prefix_queries: int = 0
    prefix_hits: int = 0
    checkpoints_saved: int = 0
    blocks_parked: int = 0
    blocks_restored: int = 0
    checkpoints_parked: int = 0
    checkpoints_restored: int = 0

    def as_dict(self) -> dict:
        return dict(vars(self), prefix_hit_rate=self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0)


@dataclass
class StepTotals:
    """Summed wall time of engine steps and its split; host = wall - forward - sample - draft
    (scheduling, input building, output processing and Python between the timed phases). Overlapped
    decode steps (--async-scheduling) count the host's launch as forward and its wait for the sampled
    tokens as sample, since the device's work runs behind the host's."""

    num_steps: int = 0
    wall_seconds: float = 0.0
    forward_seconds: float = 0.0
    sample_seconds: float = 0.0
    draft_seconds: float = 0.0
    num_tokens: int = 0           # tokens computed (prompt chunks, 1 + k per slot on decode steps)
    num_slots: int = 0            # slot-steps
    context_tokens: int = 0       # KV positions attended over, summed over slots: what attention reads

    def add(self, wall: float, forward: float, sample: float, draft: float, scheduled: list) -> None:
        self.num_steps += 1
        self.wall_seconds += wall
        self.forward_seconds += forward
        self.sample_seconds += sample
        self.draft_seconds += draft
        self.num_tokens += sum(s.num_new_tokens for s in scheduled)
        self.num_slots += len(scheduled)
        self.context_tokens += sum(s.num_computed_tokens + s.num_new_tokens for s in scheduled)

    def as_dict(self) -> dict:
        host = self.wall_seconds - self.forward_seconds - self.sample_seconds - self.draft_seconds
        per_step = (lambda x: x / self.num_steps) if self.num_steps else (lambda x: 0.0)
        return {"num_steps": self.num_steps, "wall_seconds": self.wall_seconds,
                "forward_seconds": self.forward_seconds, "sample_seconds": self.sample_seconds,
                "draft_seconds": self.draft_seconds, "host_seconds": host,
                "tokens_per_step": per_step(self.num_tokens), "slots_per_step": per_step(self.num_slots),
                "context_tokens_per_step": per_step(self.context_tokens)}


@dataclass
class StepTimes:
    """Engine-step timing, all steps and decode steps apart (every slot a 1 + k window, no prompt
    chunk): the per-decode-step time is what bandwidth figures divide by."""

    all: StepTotals = field(default_factory=StepTotals)
    decode: StepTotals = field(default_factory=StepTotals)

    def record(self, plan, result, wall_seconds: float) -> None:
        """`plan` a StepPlan, `result` its StepResult (None when the step failed)."""
        phases = (result.forward_seconds, result.sample_seconds, result.draft_seconds) if result else (0.0,) * 3
        self.all.add(wall_seconds, *phases, plan.scheduled)
        if plan.scheduled and all(s.num_new_tokens == 1 + len(s.draft_token_ids) for s in plan.scheduled):
            self.decode.add(wall_seconds, *phases, plan.scheduled)

    def as_dict(self) -> dict:
        return {"all": self.all.as_dict(), "decode": self.decode.as_dict()}
