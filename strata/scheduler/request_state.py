"""The scheduler's view of one request: its tokens, how many have KV, its slot and blocks."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from strata.reasoning import ThinkingBudget
from strata.scheduler.stats import ExpertShares, SpecStats
from strata.types import FinishReason, PromptEntry, Request


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class RequestState:
    request: Request
    eos_token_ids: tuple[int, ...]
    status: Status = Status.WAITING
    slot_id: int | None = None
    block_ids: list[int] = field(default_factory=list)       # device blocks, after the host ones
    # --kv-resident-tokens: the sequence's oldest blocks, moved to the host tier (in order, before block_ids)
    host_block_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    # speculation: drafts proposed for the next step, and this request's acceptance statistics
    draft_token_ids: list[int] = field(default_factory=list)
    requested_k: int = 0              # drafts asked of the drafter for this request's next step
    acceptance_ema: float = 1.0
    spec_stats: SpecStats = field(default_factory=SpecStats)
    expert_shares: ExpertShares = field(default_factory=ExpertShares)  # with offloaded experts
    # prefix reuse: chain hashes of the registered full blocks, tokens found in the cache at admission
    block_hashes: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0
    decode_checkpoint_key: int | None = None
    skip_prefix_cache: bool = False   # after a failed restore: read everything again
    thinking: ThinkingBudget | None = None  # a reasoning budget's state over the committed tokens
    # SamplingParams.prompt_logprobs: the entries so far by prompt position (None first), until they go out
    # with the request's first tokens
    prompt_logprobs: list[PromptEntry | None] | None = None
    prompt_logprobs_sent: bool = False

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.request.prompt_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_blocks(self) -> int:
        """Blocks of the sequence in both tiers (the host ones first)."""
        return len(self.host_block_ids) + len(self.block_ids)

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Whether this request's prompt logprobs are still to be computed and sent (its prompt must then be
        computed whole: no prefix from the cache)."""
        return self.request.sampling_params.prompt_logprobs is not None and not self.prompt_logprobs_sent

    def record_prompt_logprobs(self, first: int, entries: list[PromptEntry]) -> None:
        """A step's prompt logprobs: entries for prompt positions first, first + 1, ... (a recomputed prompt
        writes the same positions again; once they went out, nothing)."""
        if not self.wants_prompt_logprobs:
            return
        if self.prompt_logprobs is None:
            self.prompt_logprobs = [None] * len(self.request.prompt_token_ids)
        self.prompt_logprobs[first:first + len(entries)] = entries

    def take_prompt_logprobs(self) -> list[PromptEntry | None] | None:
        """The prompt logprobs, once: with the request's first committed tokens."""
        if not self.wants_prompt_logprobs:
            return None
        self.prompt_logprobs_sent = True
        entries, self.prompt_logprobs = self.prompt_logprobs, None
        return entries if entries is not None else [None] * len(self.request.prompt_token_ids)

    def all_token_ids(self) -> list[int]:
        return self.request.prompt_token_ids + self.output_token_ids

    def token_range(self, start: int, end: int) -> list[int]:
        """Tokens [start, end) of prompt + output, copying only that range (a step's new blocks at any context)."""
        prompt = self.request.prompt_token_ids
        if end <= len(prompt):
            return prompt[start:end]
        if start >= len(prompt):
            return self.output_token_ids[start - len(prompt):end - len(prompt)]
        return prompt[start:] + self.output_token_ids[:end - len(prompt)]

    def remaining_output(self, max_model_len: int) -> int:
        """Tokens this request may still emit before max_tokens or max_model_len."""
        params = self.request.sampling_params
        by_length = max_model_len - self.num_tokens
        if params.max_tokens is None:
            return by_length
        return min(by_length, params.max_tokens - len(self.output_token_ids))

    def append_outputs(self, token_ids: list[int], max_model_len: int) -> tuple[list[int], FinishReason | None]:
        """Append tokens one by one up to the first stop condition; returns the tokens kept (drafts
        accepted past an EOS or past max_tokens are dropped) and the finish reason, if any."""
        kept = []
        for token_id in token_ids:
            self.output_token_ids.append(token_id)
            kept.append(token_id)
            reason = self.check_stop(max_model_len)
            if reason is not None:
                return kept, reason
        return kept, None

    def check_stop(self, max_model_len: int) -> FinishReason | None:
        """Stop conditions on token ids (stop strings are the detokenizer's job)."""
        params = self.request.sampling_params
        last = self.output_token_ids[-1]
        if not params.ignore_eos and last in self.eos_token_ids:
            return FinishReason.STOP
        if last in params.stop_token_ids:
            return FinishReason.STOP
        if params.max_tokens is not None and len(self.output_token_ids) >= params.max_tokens:
            return FinishReason.LENGTH
        if self.num_tokens >= max_model_len:
            return FinishReason.LENGTH
        return None
