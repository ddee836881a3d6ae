"""Pure data shared by the scheduler, the runner and the front ends.

Nothing here imports torch or any other part of strata: these objects cross process boundaries
(StepPlan/StepResult between scheduler and runner, TokenDelta to the server) as plain ints, floats,
strings and lists.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field


@dataclass
class StructuredOutputs:
    """A constraint on the output, enforced token by token while decoding (vLLM's StructuredOutputsParams):
    exactly one of a JSON Schema, any JSON object, a regular expression, a choice of strings, or a grammar
    (Lark, as llguidance reads it, or GBNF). strata/structured.py turns it into a grammar."""

    json: dict | str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None

    def validate(self) -> None:
        given = [name for name in ("json", "regex", "choice", "grammar") if getattr(self, name) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError(f"structured_outputs needs exactly one of json, json_object, regex, choice, grammar "
                             f"(got {', '.join(given) or 'none'})")
        if self.choice is not None and (not self.choice or any(not isinstance(c, str) or not c for c in self.choice)):
            raise ValueError("structured_outputs.choice must be a non-empty list of non-empty strings")


@dataclass
class SamplingParams:
    """Per-request sampling options, vLLM's names and defaults.

    temperature 0 means greedy (exact argmax). top_k <= 0 and top_p == 1 disable those filters.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    # the prompt's tokens' logprobs (vLLM's name): each prompt token after the first, with this many of the
    # most likely alternatives at its position (0: the token alone); raw logprobs, as `logprobs` returns
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[int, float] | None = None        # token id -> added to its logit, in [-100, 100]
    structured_outputs: StructuredOutputs | None = None
    thinking_budget: int | None = None   # tokens inside <think> .. </think> before </think> is forced (reasoning.py)

    def __post_init__(self) -> None:
        if isinstance(self.structured_outputs, dict):
            self.structured_outputs = StructuredOutputs(**self.structured_outputs)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (disabled) or a positive integer, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if not self.repetition_penalty > 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.min_tokens > self.max_tokens):
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {self.min_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= 20:
            raise ValueError(f"prompt_logprobs must be in [0, 20], got {self.prompt_logprobs}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop must be a non-empty string or a list of non-empty strings")
        for token_id, bias in (self.logit_bias or {}).items():
            if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
                raise ValueError(f"logit_bias keys must be token ids (integers >= 0), got {token_id!r}")
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias values must be numbers in [-100, 100], got {bias!r} for token {token_id}")
        if self.structured_outputs is not None:
            self.structured_outputs.validate()
        if self.thinking_budget is not None and (isinstance(self.thinking_budget, bool)
                                                 or not isinstance(self.thinking_budget, int) or self.thinking_budget < 0):
            raise ValueError(f"thinking_budget must be an integer >= 0 (tokens), got {self.thinking_budget!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def for_choice(self, index: int) -> SamplingParams:
        """Choice `index` of n parallel choices as one engine request (n 1): its seed mixed from this one's
        (choice_seed; choice 0 keeps it, so n = 1 and choice 0 agree) and prompt logprobs on choice 0 only."""
        seed = None if self.seed is None else choice_seed(self.seed, index)
        return dataclasses.replace(self, n=1, seed=seed, prompt_logprobs=self.prompt_logprobs if index == 0 else None)


_MASK63 = (1 << 63) - 1


def choice_seed(seed: int, index: int) -> int:
    """Choice `index`'s seed: the request's own for choice 0, else a splitmix64 mix of (seed, index). The sampler
    derives per-position seeds as seed + position x golden ratio, so the choices' seeds must not be steps of that
    same constant, or choice i would replay choice 0 shifted."""
    if index == 0:
        return seed
    z = (seed ^ (index * 0xD1B54A32D192ED03)) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & _MASK63


class FinishReason(str, enum.Enum):
    STOP = "stop"        # EOS, a stop token id or a stop string
    LENGTH = "length"    # max_tokens or max_model_len reached
    ABORT = "abort"      # cancelled by the client
    ERROR = "error"      # the engine failed this request (bad state, exception)


@dataclass
class Request:
    """What a front end submits: token ids already rendered and tokenized."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float = 0.0
    # prefix cache: pin the prompt's full blocks (True), unpin them (False), or neither (None); and whether
    # this request's blocks and checkpoints go into the cache at all (strata/scheduler/prefix.py)
    pin_prefix: bool | None = None
    cache_prefix: bool = True

    def choice(self, index: int) -> Request:
        """Choice `index` of this request's n as its own engine request: id suffixed (choice 0 keeps it), params
        for_choice (seed mixed per choice, prompt logprobs on choice 0 only)."""
        return dataclasses.replace(self, request_id=self.request_id if index == 0 else f"{self.request_id}-{index}",
                                   sampling_params=self.sampling_params.for_choice(index))


@dataclass
class NewSlotData:
    """First appearance of a request in a slot: everything the runner caches for it."""

    request_id: str
    slot_id: int
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    output_token_ids: list[int] = field(default_factory=list)  # non-empty when resuming
    restore_checkpoint_row: int | None = None  # hybrid prefix hit: load this saved recurrent state
    cached_block_ids: list[int] = field(default_factory=list)  # prefix hit: the shared blocks it starts with
    restore_checkpoint_host_row: int | None = None  # ... or this parked one from host RAM
    # --kv-resident-tokens: its first blocks, in the host tier (cached_block_ids follow them)
    host_block_ids: list[int] = field(default_factory=list)


@dataclass
class ScheduledSlot:
    """One slot's work for one step: compute `num_new_tokens` tokens starting at position
    `num_computed_tokens`. A prompt chunk and a 1 + k verification window are the same thing."""

    slot_id: int
    num_computed_tokens: int
    num_new_tokens: int
    new_block_ids: list[int]
    token_ids: list[int]                        # the num_new_tokens input ids of this step
    draft_token_ids: list[int] = field(default_factory=list)  # trailing part of token_ids
    sample: bool = True                         # False for a prompt chunk that does not reach the end
    next_k: int = 0                             # drafts wanted for the next step (0: propose none)
    drafting: bool = False                      # the draft policy gives this request drafts now (its
    #                                             prompt chunks feed the MTP layer's KV only then)
    # --kv-resident-tokens: host blocks now holding the slot's oldest device blocks, in order (copied by
    # the plan's offload_blocks before the forward)
    offloaded_host_ids: list[int] = field(default_factory=list)


@dataclass
class StepPlan:
    """Scheduler -> runner. Ints and lists only."""

    step_id: int
    new_slots: list[NewSlotData]
    scheduled: list[ScheduledSlot]
    finished_slot_ids: list[int]
    # slot -> number of blocks it keeps: the tail after rejected drafts went back to the pool
    truncated_block_tables: dict[int, int] = field(default_factory=dict)
    # (slot, checkpoint row): save the slot's recurrent state before anything else this step
    checkpoint_saves: list[tuple[int, int]] = field(default_factory=list)
    # a verification step planned ahead: (slot, checkpoint row, the window's planned start, a block boundary) save the
    # slot's state before the forward if the window really starts at the boundary (the step before it accepted
    # that many drafts: decided on the device)
    boundary_saves: list[tuple[int, int, int, int]] = field(default_factory=list)
    # conversation cache copies, done before the forward: (device block, host row), (host row,
    # device block), (device checkpoint row, host row)
    park_blocks: list[tuple[int, int]] = field(default_factory=list)
    restore_blocks: list[tuple[int, int]] = field(default_factory=list)
    park_checkpoints: list[tuple[int, int]] = field(default_factory=list)
    # KV beyond VRAM, done before the forward (after the parks, before the restores): (device block, host
    # block) and (conversation-cache row, host block) copies into the host tier
    offload_blocks: list[tuple[int, int]] = field(default_factory=list)
    unpark_blocks: list[tuple[int, int]] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def carries_work(self) -> bool:
        """Whether the plan has anything for the runner beside its slots' tokens (slots to set up or free,
        truncations, checkpoint saves, cache copies)."""
        return bool(self.new_slots or self.finished_slot_ids or self.truncated_block_tables or self.checkpoint_saves
                    or self.park_blocks or self.restore_blocks or self.park_checkpoints or self.offload_blocks
                    or self.unpark_blocks)


@dataclass
class TokenLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# a prompt token's prompt logprobs: ({id: logprob} of the token and its position's most likely alternatives, the
# token's rank: 1 + the tokens more likely there)
PromptEntry = tuple[dict[int, float], int]


def entry_ranks(entry: PromptEntry, token: int, top: int | None = None) -> dict[int, tuple[float, int]]:
    """Prompt token `token`'s entry as {id: (logprob, rank)}: the alternatives ranked by their order (the `top` most
    likely of them, all when None), the token by the engine's count (it may lie beyond them)."""
    logprobs, token_rank = entry
    order = sorted(logprobs, key=lambda t: -logprobs[t])
    ranked = {t: (logprobs[t], i + 1) for i, t in enumerate(order[:top] if top is not None else order)}
    ranked[token] = (logprobs[token], token_rank)
    return ranked


@dataclass
class SlotResult:
    """Runner -> scheduler for one slot that sampled this step."""

    slot_id: int
    token_ids: list[int]                        # accepted drafts followed by the bonus token
    num_accepted: int = 0                       # how many drafts were accepted
    next_draft_token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None  # per token: id -> logprob (sampled + top-N)


@dataclass
class StepResult:
    step_id: int
    slots: list[SlotResult]
    forward_seconds: float = 0.0
    sample_seconds: float = 0.0
    draft_seconds: float = 0.0
    # with offloaded experts: slot -> (routed expert pairs, pairs computed on the CPU, copied over PCIe)
    expert_pairs: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # slots asking for prompt logprobs: slot -> (prompt position of the first entry, one PromptEntry an entry, for
    # the prompt tokens this step's rows predict)
    prompt_logprobs: dict[int, tuple[int, list[PromptEntry]]] = field(default_factory=dict)


@dataclass
class TokenDelta:
    """Engine -> front end: what one request gained this step."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool = False
    finish_reason: FinishReason | None = None
    new_logprobs: list[dict[int, float]] | None = None
    num_prompt_tokens: int = 0
    error: str | None = None
    metrics: dict | None = None   # on the finishing delta: speculation counters, preemptions
    num_cached_tokens: int = 0    # prompt tokens found in the prefix cache
    # with the request's first tokens, when it asked for them: per prompt token a PromptEntry (None first)
    prompt_logprobs: list[PromptEntry | None] | None = None


@dataclass(frozen=True)
class WeightSizes:
    """A model's weight bytes as loaded, for the memory plan: dense in the runtime dtype, or GGUF blocks."""

    total: int               # bytes of every weight
    experts: int             # bytes of the routed experts among them (all MoE layers)
    num_experts: int         # routed experts over all MoE layers
    slot_bytes: int = 0      # bytes of one device expert slot (the largest layer's expert); 0: experts are alike
    host: int = 0            # bytes that always stay in host memory (Qwen4-Exp's PLE tables), not in `total`
    mapped: int = 0          # bytes read through a GGUF file's map a few rows a step (a PLE table kept as the
                             # file's blocks), in neither: the OS pages them in and out as memory allows

    @property
    def per_slot(self) -> int:
        """Bytes one resident expert takes on the device when only some are resident."""
        return self.slot_bytes or (self.experts // self.num_experts if self.num_experts else 0)

    def on_device(self, resident_experts: int) -> int:
        """Bytes on the GPU when only `resident_experts` of the routed experts live there."""
        if resident_experts >= self.num_experts:
            return self.total
        return self.total - self.experts + self.per_slot * resident_experts
