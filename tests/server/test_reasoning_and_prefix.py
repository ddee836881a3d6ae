"""Reasoning budgets and agent prefix stability over HTTP, through a live `strata serve` of a tiny model that
thinks (tests/thinking_model.py: `<think>` / `</think>` tokens, a template that opens a thinking block, one
character per token, never a `</think>` or EOS of its own), with suffix speculation on:
- OpenAI `reasoning_effort` (chat), `reasoning.effort` (responses) through --reasoning-budgets, and Anthropic
  `thinking.budget_tokens`, end the reasoning after exactly that many tokens, in batched requests with
  different budgets;
- a Claude-Code-like second turn whose system prompt carries new `cch=` / `cc_version=` stamps reads >= 95 %
  of its prompt from the prefix cache;
- `strata_pin_prefix` keeps a prompt cached through eviction pressure that evicts an unpinned one, and
  `strata_pin_prefix: false` releases it; `strata_checkpoint: false` leaves nothing in the cache;
- bad input: a negative budget, a budget for a model that does not think (the bundled model's tokenizer)
  -> 400;
and, without a server, the effort table and its override, and exactly what stamp normalisation changes."""

from __future__ import annotations

import concurrent.futures
import json
import time

import pytest

from live_server import served
from strata.server.template import ChatTemplate
from strata.server.thinking import EFFORT_BUDGETS, Thinking, effort_budgets, from_effort
from thinking_model import FREE_CHARS, save_thinking_model, thinking_tokenizer
from tiny_tokenized import smollm2_tokenizer

BUDGETS = "low=5,medium=9,high=13"
EFFORT = {"low": 5, "medium": 9, "high": 13}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    folder = save_thinking_model(str(tmp_path_factory.mktemp("thinking-serve")))
    with served(folder, "strata-thinking-", "--max-num-seqs", "4", "--max-model-len", "2048", "--num-gpu-blocks",
                "200", "--speculative-config", '{"method": "suffix", "num_speculative_tokens": 3}',
                "--reasoning-budgets", BUDGETS, "--engine-spare", "off") as live:
        live.model = live.get("/v1/models").json()["data"][0]["id"]
        yield live


def chat(live, content: str, **fields) -> dict:
    body = {"model": live.model, "messages": [{"role": "user", "content": content}], "max_tokens": 24,
            "temperature": 0, **fields}
    r = live.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def messages(live, system: str, turns: list[dict], **fields) -> dict:
    body = {"model": live.model, "system": system, "messages": turns, "max_tokens": 8, "temperature": 0, **fields}
    r = live.post("/v1/messages", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_efforts_end_the_reasoning_after_their_budgets_in_one_batch(live):
    efforts = ["low", "medium", "high", "low", "high", "medium"]
    with concurrent.futures.ThreadPoolExecutor(len(efforts)) as pool:
        outs = list(pool.map(lambda ie: chat(live, f"question {ie[0]}", reasoning_effort=ie[1]),
                             enumerate(efforts)))
    for effort, out in zip(efforts, outs):
        message = out["choices"][0]["message"]
        # one character per token: the reasoning is exactly the budget, then "\n\n" and the answer
        assert len(message["reasoning_content"]) == EFFORT[effort], message
        assert set(message["reasoning_content"]) <= set(FREE_CHARS)
        assert message["content"].startswith("\n\n") and len(message["content"]) == 24 - EFFORT[effort] - 1
    none = chat(live, "question 0", reasoning_effort="none")["choices"][0]["message"]
    assert "reasoning_content" not in none  # the template's switch closed the block in the prompt


def test_responses_reasoning_effort_and_anthropic_budget_tokens(live):
    r = live.post("/v1/responses", {"model": live.model, "input": "question r", "max_output_tokens": 20,
                                    "temperature": 0, "reasoning": {"effort": "medium"}})
    assert r.status_code == 200, r.text
    reasoning = [item for item in r.json()["output"] if item["type"] == "reasoning"]
    assert len(reasoning[0]["content"][0]["text"]) == EFFORT["medium"]
    for budget in (0, 1, 7):
        out = messages(live, "", [{"role": "user", "content": "hello"}], max_tokens=12,
                       thinking={"type": "enabled", "budget_tokens": budget})
        thinking = [block["thinking"] for block in out["content"] if block["type"] == "thinking"]
        assert len(thinking) == (budget > 0) and len("".join(thinking)) == budget, out


def test_a_budget_with_structured_output_and_a_required_tool(live):
    """The template opened <think>: the grammar reads reasoning up to the vocabulary's own </think> token (which
    the budget forces), then the JSON answer or the tool call."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    out = chat(live, "json", max_tokens=40, reasoning_effort="low",
               response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}})
    message = out["choices"][0]["message"]
    assert len(message["reasoning_content"]) == EFFORT["low"], message
    assert list(json.loads(message["content"])) == ["ok"], message
    out = chat(live, "call f", max_tokens=80, reasoning_effort="medium", tool_choice="required",
               parallel_tool_calls=False, tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])
    message = out["choices"][0]["message"]
    assert len(message["reasoning_content"]) == EFFORT["medium"], message
    assert [call["function"]["name"] for call in message["tool_calls"]] == ["f"], message


def test_negative_budget_is_a_400(live):
    r = live.post("/v1/messages", {"model": live.model, "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": -1}})
    assert r.status_code == 400 and "thinking.budget_tokens" in r.json()["error"]["message"]


def test_budget_on_a_model_that_does_not_think_is_a_400(tool_server):
    """The bundled model's tokenizer has no <think> token (a stand-in engine: the 400 comes before it)."""
    r = tool_server.post("/v1/messages", {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 64}})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "thinking.budget_tokens" in message and "does not think" in message


def claude_code_system(version: str, stamp: str) -> str:
    rules = "".join(f"Rule {i}: keep edits small and run the tests before you answer. " for i in range(24))
    return (f"x-anthropic-billing-header: cc_version={version}; cc_entrypoint=cli; cch={stamp};\n"
            f"You are Claude Code, an interactive CLI tool. {rules}")


def test_claude_code_stamps_do_not_break_the_prefix_cache(live):
    turn1 = [{"role": "user", "content": "list the files"}]
    first = messages(live, claude_code_system("2.0.14.a1b", "1a2b3"), turn1)
    reply = "".join(block.get("text", "") for block in first["content"])
    turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "now open main.py"}]
    second = messages(live, claude_code_system("2.0.15.c4d", "9f8e7"), turn2)
    usage = second["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert prompt > 1500 and usage["cache_read_input_tokens"] >= 0.95 * prompt, usage


def test_stamp_normalisation_is_exact_and_can_be_turned_off():
    template = ChatTemplate(thinking_tokenizer())
    system = claude_code_system("2.0.14.a1b", "1a2b3") + " Say cch=ff at the end."
    other = claude_code_system("2.1.0", "ffff0") + " Say cch=ff at the end."
    user = {"role": "user", "content": "cch=12 stays in a user message"}
    ids = [template.render([{"role": "system", "content": s}, user]).prompt_token_ids for s in (system, other)]
    assert ids[0] == ids[1]
    text = template.tokenizer.decode(ids[0])
    assert "cc_version=0; cc_entrypoint=cli; cch=0;" in text and "Say cch=0 at" in text and "cch=12 stays" in text
    template.normalize_stamps = False  # --no-normalize-prompt-stamps
    ids = [template.render([{"role": "system", "content": s}, user]).prompt_token_ids for s in (system, other)]
    assert ids[0] != ids[1] and "cch=1a2b3;" in template.tokenizer.decode(ids[0])


def test_effort_table_and_its_override():
    thinks, plain = ChatTemplate(thinking_tokenizer()), ChatTemplate(smollm2_tokenizer())
    assert effort_budgets("") == EFFORT_BUDGETS == {"none": 0, "minimal": 256, "low": 1024, "medium": 8192,
                                                   "high": None}
    assert effort_budgets(" low=5, high=none ,minimal=0") == {**EFFORT_BUDGETS, "low": 5, "minimal": 0, "high": None}
    for bad in ("low", "low=-1", "extreme=3", "low=many"):
        with pytest.raises(ValueError, match="--reasoning-budgets"):
            effort_budgets(bad)
    assert from_effort("low", "", thinks) == Thinking(True, 1024)
    assert from_effort("high", "", thinks) == Thinking(True, None)
    assert from_effort("none", "", thinks) == Thinking(False, None)  # the template's switch closes the block
    assert from_effort(None, "", thinks) == Thinking()
    # a model that does not think: the effort sets the switch (if any), never a budget, and is no error
    assert from_effort("low", "", plain) == Thinking(True, None)


def pinned_blocks(live) -> int:
    return live.get("/v1/monitor").json()["cache"]["pinned_blocks"]


def document(i: int, n: int = 1000) -> str:
    return "".join(FREE_CHARS[(i * 7 + j * (i + 3)) % len(FREE_CHARS)] for j in range(n))


def cached(out: dict) -> int:
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_pinned_prefix_survives_pressure_that_evicts_an_unpinned_one(live):
    chat(live, document(1), max_tokens=2, strata_pin_prefix=True)
    chat(live, document(2), max_tokens=2)
    deadline = time.monotonic() + 10
    while pinned_blocks(live) < 60 and time.monotonic() < deadline:  # the engine's status follows its steps
        time.sleep(0.2)
    assert pinned_blocks(live) >= 60                  # ~1,020 prompt tokens in blocks of 16
    for i in range(3, 7):                             # 4 more documents through a 200-block pool
        chat(live, document(i), max_tokens=2)
    assert cached(chat(live, document(1), max_tokens=2)) >= 1000
    assert cached(chat(live, document(2), max_tokens=2)) < 16
    # unpinned: it goes the way of the others
    chat(live, document(1), max_tokens=2, strata_pin_prefix=False)
    for i in range(3, 7):
        chat(live, document(i), max_tokens=2)
    assert cached(chat(live, document(1), max_tokens=2)) < 16


def test_strata_checkpoint_false_leaves_nothing_in_the_cache(live):
    chat(live, document(9), max_tokens=2, strata_checkpoint=False)
    assert cached(chat(live, document(9), max_tokens=2)) < 16
    assert cached(chat(live, document(9), max_tokens=2, strata_checkpoint=False)) >= 1000  # it still reads


def test_the_fields_are_accepted_on_every_api(live):
    r = live.post("/v1/responses", {"model": live.model, "input": "hi", "max_output_tokens": 4,
                                    "strata_pin_prefix": False, "strata_checkpoint": True})
    assert r.status_code == 200, r.text
    r = live.post("/v1/completions", {"model": live.model, "prompt": "hi", "max_tokens": 2,
                                      "strata_checkpoint": False})
    assert r.status_code == 200, r.text
    r = live.post("/v1/messages", {"model": live.model, "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 2, "strata_pin_prefix": "yes please"})
    assert r.status_code == 400 and "strata_pin_prefix" in r.text
