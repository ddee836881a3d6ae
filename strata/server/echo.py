"""/v1/completions' `echo`: each choice's text starts with the prompt, and with `logprobs` its logprobs start
with the prompt's tokens (the first without a logprob: nothing predicts it), as vLLM and the OpenAI legacy API
return them; `max_tokens` 0 with echo returns the prompt alone (how evaluation harnesses score a text).

The engine computes the prompt logprobs once, for choice 0 (SamplingParams.prompt_logprobs, which also keeps
that request off the prefix cache so that every prompt position is computed); every choice echoes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.server.errors import APIError
from strata.server.logprobs import completion_logprobs
from strata.types import PromptEntry


@dataclass
class Echo:
    prompt_text: str
    prompt_token_ids: list[int]
    top_logprobs: int | None     # the request's `logprobs` (None: no logprobs)

    @classmethod
    def of(cls, tokenizer, prompt, prompt_token_ids: list[int], top_logprobs: int | None) -> Echo:
        """`prompt`: one of the body's prompts, a string (echoed as given) or token ids (decoded)."""
        if isinstance(prompt, str):
            text = prompt
        elif tokenizer is None:
            raise APIError(400, "echo needs the prompt's text and this model has no tokenizer", "echo")
        else:
            text = tokenizer.decode(prompt_token_ids)
        return cls(text, prompt_token_ids, top_logprobs)

    def logprobs(self, tokenizer, prompt_logprobs: list[PromptEntry | None] | None) -> dict | None:
        """The prompt's part of a choice's logprobs (completion_logprobs' shape), or None without logprobs."""
        if self.top_logprobs is None:
            return None
        ids = self.prompt_token_ids
        entries = prompt_logprobs if prompt_logprobs is not None else [None] * len(ids)
        first = completion_logprobs(tokenizer, ids[:1], [{}], self.top_logprobs)
        rest = completion_logprobs(tokenizer, ids[1:], [e[0] if e else {} for e in entries[1:]], self.top_logprobs,
                                   len(first["tokens"][0]))
        return {"tokens": first["tokens"] + rest["tokens"], "token_logprobs": [None] + rest["token_logprobs"],
                "top_logprobs": [None] + rest["top_logprobs"], "text_offset": [0] + rest["text_offset"]}

    @staticmethod
    def text_length(logprobs: dict | None) -> int:
        """Where the text after these logprobs' tokens starts (their tokens' texts, as text_offset counts)."""
        return sum(len(token) for token in logprobs["tokens"]) if logprobs else 0


def joined(head: dict | None, tail: dict | None) -> dict | None:
    """Two parts of a choice's logprobs, one after the other."""
    if head is None or tail is None:
        return head or tail
    return {key: head[key] + tail[key] for key in head}
