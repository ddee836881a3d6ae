"""/v1/completions with `echo` and `logprobs` (how evaluation harnesses score a text), with the official `openai`
client against a live `strata serve` (bundled model, CPU, float32): the prompt's tokens come back with HF
transformers' logprobs on the same GGUF (the first without one), then the completion's; `max_tokens` 0 returns the
prompt alone; a stream concatenates to the same; every choice of n echoes the prompt; max_tokens 0 without echo is
a 400 naming max_tokens."""

from __future__ import annotations

import os

import openai
import pytest
import torch

from live_server import API_KEY, MODEL

TEXT = "The quick brown fox jumps over the lazy dog because it was"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def hf(bundled_gguf):
    """(tokenizer, model) of HF transformers on the bundled GGUF."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fast_gguf import fast_gguf_arrays

    folder, name = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    return tokenizer, model


def hf_prompt_logprobs(hf, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf[1](torch.tensor([token_ids])).logits[0].float().log_softmax(dim=-1)  # [T, V]


def test_echo_returns_the_prompt_tokens_with_hf_logprobs_then_the_completion(client, hf):
    tokenizer = hf[0]
    ids = tokenizer.encode(TEXT)
    reference = hf_prompt_logprobs(hf, ids)
    reply = client.completions.create(model=MODEL, prompt=TEXT, echo=True, logprobs=2, max_tokens=3, temperature=0,
                                      extra_body={"ignore_eos": True})
    choice, n = reply.choices[0], len(ids)
    assert reply.usage.prompt_tokens == n and reply.usage.completion_tokens == 3
    assert choice.text.startswith(TEXT) and len(choice.text) > len(TEXT)
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n + 3
    assert lp.tokens[:n] == [tokenizer.decode([t]) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for i in range(1, n):
        assert lp.token_logprobs[i] == pytest.approx(reference[i - 1, ids[i]].item(), abs=1e-3), i
        top = reference[i - 1].topk(2).indices.tolist()
        assert set(lp.top_logprobs[i]) == {tokenizer.decode([t]) for t in top}, i
    # the completion's tokens follow, greedy: each its position's most likely token
    assert all(lp.token_logprobs[i] == max(lp.top_logprobs[i].values()) for i in range(n, n + 3))
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[n] == sum(len(t) for t in lp.tokens[:n])


def test_max_tokens_zero_scores_the_prompt_alone_and_a_stream_says_the_same(client):
    ids = [int(t) for t in range(300, 316)]  # a prompt as token ids, as harnesses send one
    full = client.completions.create(model=MODEL, prompt=ids, echo=True, logprobs=1, max_tokens=0, temperature=0)
    choice = full.choices[0]
    assert full.usage.completion_tokens == 0 and full.usage.prompt_tokens == len(ids)
    assert choice.finish_reason == "length" and len(choice.logprobs.tokens) == len(ids)
    assert choice.logprobs.token_logprobs[0] is None and all(v < 0 for v in choice.logprobs.token_logprobs[1:])
    chunks = list(client.completions.create(model=MODEL, prompt=ids, echo=True, logprobs=1, max_tokens=0,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    assert sum((p.tokens for p in streamed), []) == choice.logprobs.tokens
    streamed_lps = sum((p.token_logprobs for p in streamed), [])
    assert streamed_lps[0] is None and streamed_lps[1:] == pytest.approx(choice.logprobs.token_logprobs[1:], abs=1e-5)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_stream_with_completion_tokens_concatenates_to_the_reply(client):
    kwargs = dict(model=MODEL, prompt=TEXT, echo=True, logprobs=2, max_tokens=4, temperature=0,
                  extra_body={"ignore_eos": True})
    reply = client.completions.create(**kwargs).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(stream=True, **kwargs) if c.choices]
    assert "".join(c.text for c in chunks) == reply.text
    parts = [c.logprobs for c in chunks if c.logprobs]
    assert sum((p.tokens for p in parts), []) == reply.logprobs.tokens
    assert sum((p.text_offset for p in parts), []) == reply.logprobs.text_offset
    streamed = sum((p.token_logprobs for p in parts), [])
    assert streamed[0] is None and streamed[1:] == pytest.approx(reply.logprobs.token_logprobs[1:], abs=1e-4)


def test_every_choice_of_n_echoes_the_prompt(client):
    reply = client.completions.create(model=MODEL, prompt=TEXT, echo=True, logprobs=0, max_tokens=2, n=2,
                                      temperature=1.0, seed=3)
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert choice.text.startswith(TEXT) and choice.logprobs.token_logprobs[0] is None
    first, second = (c.logprobs for c in reply.choices)
    n = reply.usage.prompt_tokens
    assert first.tokens[:n] == second.tokens[:n] and first.token_logprobs[:n] == second.token_logprobs[:n]


def test_max_tokens_zero_without_echo_is_refused(server):
    response = server.post("/v1/completions", {"model": MODEL, "prompt": TEXT, "max_tokens": 0})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "max_tokens"


def test_vllm_prompt_logprobs_field_with_ranks_on_completions_and_chat(server, hf):
    tokenizer = hf[0]
    ids = tokenizer.encode(TEXT)
    reference = hf_prompt_logprobs(hf, ids)
    reply = server.post("/v1/completions", {"model": MODEL, "prompt": TEXT, "max_tokens": 1, "prompt_logprobs": 2,
                                            "n": 2, "temperature": 0}).json()
    for choice in reply["choices"]:  # vLLM's shape: each choice carries its prompt's
        entries = choice["prompt_logprobs"]
        assert len(entries) == len(ids) and entries[0] is None
        for i in range(1, len(ids)):
            row, token = reference[i - 1], ids[i]
            entry = entries[i][str(token)]
            assert entry["logprob"] == pytest.approx(row[token].item(), abs=1e-3)
            assert entry["rank"] == 1 + int((row > row[token]).sum()) and entry["decoded_token"] == tokenizer.decode([token])
            top = row.topk(2).indices.tolist()
            assert {int(t) for t in entries[i]} == set(top) | {token}
            assert [entries[i][str(t)]["rank"] for t in top] == [1, 2] or token in top
    chat = [{"role": "user", "content": "Say hi."}]
    prompt = server.post("/tokenize", {"messages": chat}).json()["tokens"]
    reply = server.post("/v1/chat/completions", {"model": MODEL, "messages": chat, "max_tokens": 1,
                                                 "prompt_logprobs": 0}).json()
    entries = reply["prompt_logprobs"]  # vLLM's shape: beside the choices
    assert len(entries) == len(prompt) and entries[0] is None
    assert all(list(e) == [str(t)] for e, t in zip(entries[1:], prompt[1:]))


def test_prompt_logprobs_with_stream_is_refused(server):
    response = server.post("/v1/completions", {"model": MODEL, "prompt": TEXT, "max_tokens": 1, "prompt_logprobs": 1,
                                               "stream": True})
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt_logprobs"
