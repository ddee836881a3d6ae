"""/v1/completions with a list of prompts (as evaluation harnesses batch them), with the official `openai` client
against a live `strata serve` (bundled model, CPU): prompt p's n choices come at indexes p * n .. p * n + n - 1,
each what that prompt alone gives; echo and logprobs per prompt; a stream concatenates to the same; usage sums
the prompts; one bad prompt or too many prompts is a 400 naming it, with nothing submitted."""

from __future__ import annotations

import openai
import pytest

from live_server import API_KEY, MODEL

TEXTS = ["Once upon a time, in a land far away,", "The three primary colours are"]
GREEDY = dict(max_tokens=4, temperature=0, extra_body={"ignore_eos": True})


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_each_prompt_gets_its_n_choices_at_its_indexes(client):
    alone = [client.completions.create(model=MODEL, prompt=text, **GREEDY) for text in TEXTS]
    reply = client.completions.create(model=MODEL, prompt=TEXTS, n=2, **GREEDY)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == [alone[0].choices[0].text] * 2 + [alone[1].choices[0].text] * 2
    assert reply.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert reply.usage.completion_tokens == 4 * 4


def test_token_id_prompts_echoed_and_scored_each_as_alone(client):
    prompts = [[300, 301, 302, 303, 304, 305], [410, 411, 412, 413]]
    kwargs = dict(model=MODEL, echo=True, logprobs=1, max_tokens=0, temperature=0)
    alone = [client.completions.create(prompt=p, **kwargs).choices[0] for p in prompts]
    reply = client.completions.create(prompt=prompts, **kwargs)
    assert reply.usage.prompt_tokens == 10 and reply.usage.completion_tokens == 0
    for choice, single in zip(reply.choices, alone):
        assert choice.text == single.text and choice.logprobs.tokens == single.logprobs.tokens
        assert choice.logprobs.token_logprobs[0] is None
        assert choice.logprobs.token_logprobs[1:] == pytest.approx(single.logprobs.token_logprobs[1:], abs=1e-4)


def test_a_stream_of_several_prompts_concatenates_to_the_reply(client):
    reply = client.completions.create(model=MODEL, prompt=TEXTS, n=2, echo=True, **GREEDY)
    texts = ["", "", "", ""]
    for chunk in client.completions.create(model=MODEL, prompt=TEXTS, n=2, echo=True, stream=True, **GREEDY):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [c.text for c in reply.choices]
    assert texts[0].startswith(TEXTS[0]) and texts[2].startswith(TEXTS[1])


@pytest.mark.parametrize("prompt, param", [
    (["fine", ""], "prompt.1"),                       # an empty prompt among good ones
    ([[5, 6], [10 ** 9]], "prompt.1"),                # a token id outside the vocabulary
    ([[5]] * 65, "prompt"),                           # more than --max-prompts (64)
])
def test_a_bad_prompt_list_is_400_naming_it_and_submits_nothing(server, prompt, param):
    before = server.status()["in_flight_requests"]
    response = server.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert server.status()["in_flight_requests"] == before
