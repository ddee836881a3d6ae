"""Perplexity of a model on a text, as llama.cpp's `llama-perplexity` measures it: the text's tokens cut into
windows of `context` tokens (each starting with the BOS token where the tokenizer adds one), each window one
request asking for its prompt logprobs (SamplingParams.prompt_logprobs), scoring the tokens from `first_scored`
on (by default the window's second half, as llama-perplexity does, so every scored token sees at least half a
window before it). PPL = exp(mean negative logprob), with the standard error of that mean.

What it is for: the same text through a model's quantized files (a Q4_K_M against a Q8_0 against the bf16
folder) says what a quantization costs, in the number llama.cpp users compare."""

from __future__ import annotations

import math
import statistics
import time

from strata.engine.llm import LLM
from strata.types import SamplingParams


def text_windows(token_ids: list[int], context: int, bos_token_id: int | None,
                 max_windows: int | None = None) -> list[list[int]]:
    """Consecutive windows of `context` tokens (the last partial one dropped), each led by bos_token_id if given."""
    body = context - (bos_token_id is not None)
    if body < 2:
        raise ValueError(f"--context {context} leaves no tokens to score; use at least 3")
    windows = []
    for start in range(0, len(token_ids) - body + 1, body):
        lead = [bos_token_id] if bos_token_id is not None else []
        windows.append(lead + token_ids[start:start + body])
        if max_windows is not None and len(windows) == max_windows:
            break
    if not windows:
        raise ValueError(f"the text has {len(token_ids)} tokens, fewer than one window of {context}; use a longer "
                         f"text or a smaller --context")
    return windows


def bench_perplexity(llm: LLM, windows: list[list[int]], first_scored: int) -> dict:
    """Every window's prompt logprobs in one batch -> {perplexity, its standard error, negative logprobs' mean,
    tokens scored, per-window perplexities, seconds, prompt tokens a second}."""
    if not 1 <= first_scored < len(windows[0]):
        raise ValueError(f"first scored position {first_scored} is outside the window of {len(windows[0])} tokens")
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": window} for window in windows], params)
    seconds = time.perf_counter() - started
    nll, per_window = [], []
    for window, output in zip(windows, outputs):
        entries = output.prompt_logprobs
        window_nll = [-entries[i][window[i]].logprob for i in range(first_scored, len(window))]
        nll += window_nll
        per_window.append(math.exp(statistics.fmean(window_nll)))
    mean = statistics.fmean(nll)
    stderr = statistics.stdev(nll) / math.sqrt(len(nll)) if len(nll) > 1 else 0.0
    num_tokens = sum(len(w) for w in windows)
    return {"perplexity": math.exp(mean), "perplexity_stderr": math.exp(mean) * stderr, "mean_nll": mean,
            "scored_tokens": len(nll), "windows": len(windows), "window_perplexities": per_window,
            "seconds": seconds, "prompt_tok_s": num_tokens / seconds}
