"""Logprobs in the OpenAI shapes, from the engine's per-token {token id: logprob} maps (the sampled
token plus the top-N alternatives). A stream sends each chunk's tokens in the same shapes, so the chunks'
lists concatenate to the non-streamed ones. Prompt logprobs (the engine's PromptEntry, with ranks) in vLLM's
`prompt_logprobs` shape."""

from __future__ import annotations

from strata.types import PromptEntry, entry_ranks


def _entry(tokenizer, token_id: int, logprob: float) -> dict:
    text = tokenizer.decode([token_id]) if tokenizer is not None else str(token_id)
    return {"token": text, "logprob": max(logprob, -9999.0), "bytes": list(text.encode("utf-8"))}


def chat_logprobs(tokenizer, token_ids: list[int], logprobs: list[dict[int, float]], top_n: int) -> dict:
    content = []
    for token_id, entry in zip(token_ids, logprobs):
        top = sorted(entry.items(), key=lambda kv: -kv[1])[:top_n]
        content.append({**_entry(tokenizer, token_id, entry.get(token_id, float("-inf"))),
                        "top_logprobs": [_entry(tokenizer, t, lp) for t, lp in top]})
    return {"content": content}


def completion_logprobs(tokenizer, token_ids: list[int], logprobs: list[dict[int, float]], top_n: int,
                        text_offset: int = 0) -> dict:
    """`text_offset`: where the first token's text starts (a stream's chunk continues its choice's text)."""
    tokens, token_logprobs, top_logprobs, offsets, offset = [], [], [], [], text_offset
    for token_id, entry in zip(token_ids, logprobs):
        sampled = _entry(tokenizer, token_id, entry.get(token_id, float("-inf")))
        tokens.append(sampled["token"])
        token_logprobs.append(sampled["logprob"])
        top = sorted(entry.items(), key=lambda kv: -kv[1])[:top_n]
        top_logprobs.append({_entry(tokenizer, t, lp)["token"]: max(lp, -9999.0) for t, lp in top})
        offsets.append(offset)
        offset += len(sampled["token"])
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def prompt_logprobs_json(tokenizer, token_ids: list[int], entries: list[PromptEntry | None] | None, top_n: int
                         ) -> list[dict | None]:
    """vLLM's `prompt_logprobs`: per prompt token None (the first) or {"<id>": {logprob, rank, decoded_token}} of the
    token and its position's top_n most likely alternatives."""
    entries = entries if entries is not None else [None] * len(token_ids)
    out: list[dict | None] = [None]
    for token, entry in zip(token_ids[1:], entries[1:]):
        if entry is None:
            out.append(None)
            continue
        ranked = {}
        for t, (lp, rank) in entry_ranks(entry, token, top_n).items():
            shown = _entry(tokenizer, t, lp)
            ranked[str(t)] = {"logprob": shown["logprob"], "rank": rank, "decoded_token": shown["token"]}
        out.append(ranked)
    return out
