"""Engine-wide speculation and step counters (per-request ones live on RequestState)."""

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

    def record_step(self, num_tokens: int) -> None:
        self.num_steps += 1
        self.num_scheduled_tokens += num_tokens

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
                "num_verify_windows": self.num_verify_windows, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "mean_accepted_length": self.mean_accepted_length,
                "acceptance_per_position": self.acceptance_per_position()}
