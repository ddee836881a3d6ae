"""The offline Python API, vLLM-style: `LLM(model=...).generate(prompts, sampling_params)` and
`.chat(messages)`, running the engine core in-process. Every prompt and every SamplingParams is
validated before any of them reaches the engine."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from strata.config import CacheConfig, EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.engine.build import LoadedModel
from strata.engine.core import EngineCore
from strata.tokenizer import render_chat
from strata.types import FinishReason, Request, SamplingParams, TokenDelta, TokenLogprob, entry_ranks

PromptType = str | dict[str, Any]


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[dict[int, TokenLogprob]] | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    metrics: dict | None = None   # speculation counters per position, preemptions
    num_cached_tokens: int = 0    # prompt tokens served from the prefix cache
    # SamplingParams.prompt_logprobs: per prompt token {id: TokenLogprob with its rank} (None for the first), as vLLM's
    prompt_logprobs: list[dict[int, TokenLogprob] | None] | None = None


class LLM:
    def __init__(self, model: str | None = None, dtype: str = "auto", device: str = "auto",
                 max_num_seqs: int = 8, max_model_len: int | None = None, seed: int = 0,
                 max_num_batched_tokens: int = 2048, block_size: int = 16, num_gpu_blocks: int | None = None,
                 speculative_config: dict | None = None, policy: str = "fcfs", quiet: bool = True,
                 chat_template: str = "", **options) -> None:
        """`options`: any other CacheConfig, SchedulerConfig, RunnerConfig or ExpertConfig field
        (enable_prefix_caching, async_scheduling, cuda_graphs, expert_cache, …)."""
        cache_options = _take_fields(options, CacheConfig)
        scheduler_options = _take_fields(options, SchedulerConfig)
        runner_options = _take_fields(options, RunnerConfig)
        expert_options = _take_fields(options, ExpertConfig)
        if options:
            raise TypeError(f"LLM got unknown options {sorted(options)}")
        config = EngineConfig(
            model=model or "", chat_template=chat_template,
            cache=CacheConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks, **cache_options),
            scheduler=SchedulerConfig(max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                                      max_num_batched_tokens=max_num_batched_tokens, policy=policy,
                                      **scheduler_options),
            runner=RunnerConfig(device=device, dtype=dtype, seed=seed, **runner_options),
            speculative=SpecConfig.from_json(speculative_config),
            experts=ExpertConfig(**expert_options),
        )
        self._start(config, quiet)

    @classmethod
    def from_config(cls, config: EngineConfig, quiet: bool = True, share_model_of: LLM | None = None) -> LLM:
        """`share_model_of`: an LLM of the same model whose weights this one uses too (no second copy)."""
        llm = cls.__new__(cls)
        llm._start(config, quiet, share_model_of.engine.loaded if share_model_of is not None else None)
        return llm

    def _start(self, config: EngineConfig, quiet: bool, shared: LoadedModel | None = None) -> None:
        self.engine = EngineCore(config, quiet=quiet, shared=shared)
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def close(self) -> None:
        """Stop what outlives this object (a pipeline split's other processes); idempotent."""
        self.engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- public API ------------------------------------------------------------------------------

    def generate(self, prompts: PromptType | Sequence[PromptType],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        """One RequestOutput per prompt, with `n` CompletionOutputs (SamplingParams.n; each choice its own engine
        request, seeded by SamplingParams.for_choice). A prompt's other choices are submitted once its choice 0
        has its first token: its prompt is then in the prefix cache, and they read it from there."""
        prompts = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
        params = self._params_per_prompt(sampling_params, len(prompts))
        requests = [self._make_request(p, sp).choice(0) for p, sp in zip(prompts, params)]
        for request in requests:
            self.engine.validate(request)
        outputs = [self._empty_output(r, p, sp.n) for r, p, sp in zip(requests, prompts, params)]
        choice_of = {r.request_id: (out, 0) for r, out in zip(requests, outputs)}  # request id -> (output, choice)
        siblings = {r.request_id: [(r.choice(j), j) for j in range(1, sp.n)] for r, sp in zip(requests, params)}
        for request in requests:
            self.engine.add_request(request)
        while self.engine.has_unfinished():
            for delta in self.engine.step():
                output, choice = choice_of[delta.request_id]
                self._apply(output, choice, delta)
                for sibling, j in siblings.pop(delta.request_id, ()):  # choice 0's first token: prompt cached
                    choice_of[sibling.request_id] = (output, j)
                    self.engine.add_request(sibling)
        return outputs

    def chat(self, messages: list[dict] | list[list[dict]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             **template_kwargs: Any) -> list[RequestOutput]:
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [{"prompt_token_ids": render_chat(self._require_tokenizer(), conv, **template_kwargs)}
                   for conv in conversations]
        return self.generate(prompts, sampling_params)

    def stream(self, prompt: PromptType, sampling_params: SamplingParams | None = None) -> Iterator[TokenDelta]:
        """One request's deltas as they are produced (used by the terminal chat)."""
        request = self._make_request(prompt, sampling_params or SamplingParams())
        self.engine.add_request(request)
        try:
            while self.engine.has_unfinished():
                for delta in self.engine.step():
                    if delta.request_id == request.request_id:
                        yield delta
                        if delta.finished:
                            return
        finally:
            self.engine.abort_request(request.request_id)

    def encode_chat(self, messages: list[dict], **template_kwargs: Any) -> list[int]:
        return render_chat(self._require_tokenizer(), messages, **template_kwargs)

    # ---- helpers ---------------------------------------------------------------------------------

    def _params_per_prompt(self, sampling_params, count: int) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams() for _ in range(count)]
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * count
        if len(sampling_params) != count:
            raise ValueError(f"got {len(sampling_params)} SamplingParams for {count} prompts")
        return list(sampling_params)

    def _make_request(self, prompt: PromptType, params: SamplingParams) -> Request:
        if isinstance(prompt, dict):
            if "prompt_token_ids" not in prompt:
                raise ValueError("a dict prompt needs 'prompt_token_ids'")
            ids = list(prompt["prompt_token_ids"])
        elif isinstance(prompt, str):
            ids = self._require_tokenizer().encode(prompt, add_special_tokens=True) if prompt else []
        else:
            raise ValueError(f"a prompt is a string or {{'prompt_token_ids': [...]}}, got {type(prompt).__name__}")
        return Request(f"offline-{next(self._ids)}", ids, params)

    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer; pass prompts as {'prompt_token_ids': [...]}")
        return self.tokenizer

    @staticmethod
    def _empty_output(request: Request, prompt: PromptType, n: int = 1) -> RequestOutput:
        wants_logprobs = request.sampling_params.logprobs is not None
        return RequestOutput(request.request_id, prompt if isinstance(prompt, str) else None, request.prompt_token_ids,
                             [CompletionOutput(j, logprobs=[] if wants_logprobs else None) for j in range(n)])

    @staticmethod
    def _apply(output: RequestOutput, choice: int, delta: TokenDelta) -> None:
        completion = output.outputs[choice]
        completion.token_ids.extend(delta.new_token_ids)
        completion.text += delta.new_text
        if completion.logprobs is not None and delta.new_logprobs:
            completion.logprobs.extend({tid: TokenLogprob(lp) for tid, lp in entry.items()}
                                       for entry in delta.new_logprobs)
        if delta.prompt_logprobs is not None:
            output.prompt_logprobs = [  # vLLM's {id: Logprob}, with ranks
                None if entry is None else {t: TokenLogprob(lp, rank) for t, (lp, rank) in
                                            entry_ranks(entry, token).items()}
                for entry, token in zip(delta.prompt_logprobs, output.prompt_token_ids)]
        if delta.finished:
            completion.finish_reason = delta.finish_reason.value if delta.finish_reason else None
            if delta.finish_reason is FinishReason.ERROR:
                raise RuntimeError(f"request {delta.request_id} failed in the engine: {delta.error}")
            if choice == 0:  # the request's metrics and cache hits are its choice 0's
                output.metrics = delta.metrics
                output.num_cached_tokens = delta.num_cached_tokens
            output.finished = all(c.finish_reason is not None for c in output.outputs)


def _take_fields(options: dict, cls) -> dict:
    """Pop the entries of `options` that name fields of the config dataclass `cls`."""
    return {f.name: options.pop(f.name) for f in fields(cls) if f.name in options}
