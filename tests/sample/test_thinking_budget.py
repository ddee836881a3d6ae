"""Reasoning budgets: the ThinkingBudget state machine (strata/reasoning.py) on token ids, and the engine
forcing `</think>` + the template's separator after exactly `budget` thinking tokens, in batches of
different budgets, greedy and sampled, with suffix speculation on (forced tokens inside verify windows:
greedy output equals speculation off), on a tiny model that never closes its thinking by itself
(tests/thinking_model.py)."""

from __future__ import annotations

import pytest

from strata import LLM, SamplingParams
from strata.reasoning import ThinkingBudget, ThinkingTokens

TOKENS = ThinkingTokens(open_id=1, close_id=2, end_ids=(2, 9, 9))


def walk(budget: ThinkingBudget, token_ids: list[int]) -> list[int | None]:
    forced = []
    for token_id in token_ids:
        forced.append(budget.next_forced())
        budget.advance(token_id)
    return forced + [budget.next_forced()]


def test_budget_forces_close_then_separator_after_exactly_n_thinking_tokens():
    budget = ThinkingBudget.start(TOKENS, 3, [5, 1, 9])           # the prompt opened <think>
    assert walk(budget, [5, 6, 7, 2, 9, 9, 5]) == [None, None, None, 2, 9, 9, None, None]
    assert not budget.is_open and budget.num_thinking == 3


def test_model_that_opens_and_closes_itself():
    closed = ThinkingBudget.start(TOKENS, 4, [5, 1, 9, 2, 9])     # an earlier turn's block is closed
    assert not closed.is_open
    # the model opens a block itself: counted from the token after <think>; its own early close is free
    assert walk(closed, [1, 5, 2, 5, 5]) == [None, None, None, None, None, None]
    assert closed.num_thinking == 1
    # a second block shares the one budget: 1 + 3 tokens, then the close is forced
    assert walk(closed, [1, 5, 5, 5, 2, 9, 9]) == [None, None, None, None, 2, 9, 9, None]


def test_budget_zero_closes_at_once_and_a_resumed_request_continues_its_count():
    assert ThinkingBudget.start(TOKENS, 0, [1]).next_forced() == 2
    resumed = ThinkingBudget.start(TOKENS, 3, [1], output_token_ids=[5, 5, 5, 2, 9])
    assert resumed.next_forced() == 9 and resumed.pending == (9,)


def test_forced_along_a_window_walks_the_drafts_without_moving_the_state():
    budget = ThinkingBudget.start(TOKENS, 2, [1], output_token_ids=[5])
    assert budget.forced_along([5, 7, 2, 9]) == [None, 2, 2, 9, 9]  # the draft 7 is wrong: still </think>
    assert budget.forced_along([5, 2, 9, 9]) == [None, 2, 9, 9, None]
    assert budget.num_thinking == 1 and budget.is_open


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from thinking_model import save_thinking_model

    return save_thinking_model(str(tmp_path_factory.mktemp("thinking")))


def _run(folder: str, params: list[SamplingParams], speculative_config: dict | None):
    llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
              speculative_config=speculative_config)
    prompts = [{"prompt_token_ids": llm.encode_chat([{"role": "user", "content": f"question {i}"}])}
               for i in range(len(params))]
    return llm, [o.outputs[0].token_ids for o in llm.generate(prompts, params)]


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_engine_ends_thinking_after_exactly_budget_tokens_batched_with_speculation(folder, sampled):
    budgets = [0, 3, 7, 19]
    params = [SamplingParams(temperature=0.7 if sampled else 0.0, top_k=5, seed=i, max_tokens=32,
                             thinking_budget=b) for i, b in enumerate(budgets)]
    llm, spec_on = _run(folder, params, {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False})
    end = list(llm.engine.thinking_tokens.end_ids)
    assert end == [llm.tokenizer.convert_tokens_to_ids("</think>")] + llm.tokenizer.encode("\n\n")
    for budget, out in zip(budgets, spec_on):
        assert out[budget:budget + len(end)] == end, (budget, out)
        assert end[0] not in out[:budget] + out[budget + 1:]  # never before the budget, never again
    stats = llm.engine.scheduler.stats
    assert 0 < stats.num_accepted_tokens <= stats.num_draft_tokens  # windows were verified
    if not sampled:  # greedy: the same tokens as without speculation (sampled keeps only the distribution)
        _, spec_off = _run(folder, params, None)
        assert spec_on == spec_off
