"""Reasoning budgets: the ThinkingBudget state machine (strata/reasoning.py) on token ids, and the engine
forcing `</think>` + the template's separator after exactly `budget` thinking tokens, in batches of
different budgets, greedy and sampled, with suffix speculation on (forced tokens inside verify windows:
greedy output equals speculation off) and with overlapped decoding (--async-scheduling), on a tiny model
that never closes its thinking by itself (tests/thinking_model.py)."""

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


def test_rules_along_a_window_walk_the_drafts_without_moving_the_state():
    budget = ThinkingBudget.start(TOKENS, 2, [1], output_token_ids=[5])
    forced = [force for force, _ in budget.rules_along([5, 7, 2, 9])]
    assert forced == [None, 2, 2, 9, 9]                          # the draft 7 is wrong: still </think>
    assert budget.rules_along([5, 2, 9, 9]) == [(None, None), (2, None), (9, None), (9, None), (None, 1)]
    assert budget.num_thinking == 1 and budget.is_open


def test_a_spent_budget_bans_a_new_block_and_an_unspent_one_does_not():
    spent = ThinkingBudget.start(TOKENS, 2, [1], output_token_ids=[5, 5, 2, 9, 9])
    assert spent.next_forced() is None and spent.next_banned() == 1
    natural = ThinkingBudget.start(TOKENS, 2, [1], output_token_ids=[5, 2])  # closed by the model, 1 < 2
    assert natural.next_banned() is None
    assert ThinkingBudget.start(TOKENS, 0, [5]).next_banned() == 1          # budget 0: no thinking at all


@pytest.mark.parametrize("outputs, ahead", [
    ([], True), ([5], True), ([5, 5], True), ([5, 5, 5], False),      # open, budget 4: room for two more?
    ([5, 5, 5, 5], False), ([5, 5, 5, 5, 2], False),                 # forced </think>, then pending
    ([5, 5, 5, 5, 2, 9, 9], True), ([5, 2], True), ([5, 2, 1], True)])
def test_can_decode_ahead_only_where_the_token_in_flight_changes_nothing(outputs, ahead):
    """Brute force: the rule at the position after next is the same for every possible next token."""
    budget = ThinkingBudget.start(TOKENS, 4, [1], output_token_ids=outputs)
    assert budget.can_decode_ahead() == ahead
    if ahead:
        now = (budget.next_forced(), budget.next_banned())
        for token_id in [t for t in range(12) if budget.next_forced() in (None, t) and budget.next_banned() != t]:
            after = ThinkingBudget.start(TOKENS, 4, [1], output_token_ids=outputs + [token_id])
            assert (after.next_forced(), after.next_banned()) == now, token_id


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from thinking_model import save_thinking_model

    return save_thinking_model(str(tmp_path_factory.mktemp("thinking")))


def _run(folder: str, params: list[SamplingParams], speculative_config: dict | None, **options):
    llm = LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
              speculative_config=speculative_config, **options)
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


def test_budgeted_requests_decode_ahead_where_it_is_safe_with_the_same_tokens(folder, monkeypatch):
    """--async-scheduling samples a step before the previous token is read: a budgeted request takes part
    wherever that token cannot change what is forced next, and its tokens equal plain stepping's, alone (every
    step it can, ahead) and in a batch."""
    from strata.runner.model_runner import ModelRunner

    ahead, launch = [], ModelRunner.launch_decode
    monkeypatch.setattr(ModelRunner, "launch_decode",
                        lambda self, plan, inputs_from=None: ahead.append(inputs_from is not None)
                        or launch(self, plan, inputs_from))
    for budgets in ([9], [2, 6, 11]):
        params = [SamplingParams(temperature=0.0, max_tokens=30, thinking_budget=b) for b in budgets]
        _, plain = _run(folder, params, None, async_scheduling=False)
        ahead.clear()
        llm, overlapped = _run(folder, params, None, async_scheduling=True)
        assert overlapped == plain
        end = list(llm.engine.thinking_tokens.end_ids)
        assert all(out[b:b + len(end)] == end for b, out in zip(budgets, overlapped))
        assert sum(ahead) >= 15 and not all(ahead)  # most steps ran ahead; those around each forced end did not
