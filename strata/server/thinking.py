"""What a request asks of the model's thinking: the chat template's `enable_thinking` switch and a token
budget that the engine enforces (SamplingParams.thinking_budget: once spent, `</think>` is forced and the
answer follows; strata/reasoning.py).

OpenAI `reasoning_effort` (chat) and `reasoning.effort` (responses) map through EFFORT_BUDGETS, which
`--reasoning-budgets` may override; Anthropic `thinking.budget_tokens` is the budget itself. A model
without `<think>` / `</think>` tokens ignores an effort (clients send one by default) but refuses an
explicit budget (400). Where the template's switch already turned thinking off, no budget is set.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from strata.server.errors import APIError
from strata.server.template import ChatTemplate

# effort -> thinking tokens (None: no budget, the model ends its thinking itself); docs/api.md shows it
EFFORT_BUDGETS: dict[str, int | None] = {"none": 0, "minimal": 256, "low": 1024, "medium": 8192, "high": None}


@dataclass(frozen=True)
class Thinking:
    enable: bool | None = None   # the template's enable_thinking (None: its default)
    budget: int | None = None    # SamplingParams.thinking_budget


@functools.lru_cache(maxsize=8)
def effort_budgets(option: str) -> dict[str, int | None]:
    """`--reasoning-budgets` ("low=512,high=none": each effort's budget, or none for no limit) over the
    defaults. ValueError naming the problem."""
    table = dict(EFFORT_BUDGETS)
    for item in filter(None, (part.strip() for part in option.split(","))):
        effort, _, value = item.partition("=")
        effort, value = effort.strip(), value.strip().lower()
        if effort not in table or not value:
            raise ValueError(f"--reasoning-budgets: {item!r} is not EFFORT=TOKENS with EFFORT one of "
                             f"{', '.join(table)} (TOKENS a number >= 0, or none)")
        if value in ("none", "unlimited"):
            table[effort] = None
        elif value.isdigit():
            table[effort] = int(value)
        else:
            raise ValueError(f"--reasoning-budgets: {effort}={value!r}: give a number of tokens >= 0, or none")
    return table


def from_effort(effort: str | None, option: str, template: ChatTemplate) -> Thinking:
    """OpenAI's effort -> the switch (off only for "none") and the table's budget."""
    if effort is None:
        return Thinking()
    return _with_budget(effort != "none", effort_budgets(option)[effort], template, explicit=False)


def from_anthropic(config, template: ChatTemplate) -> Thinking:
    """Anthropic's `thinking` ({type: enabled | disabled | adaptive, budget_tokens}) -> switch and budget."""
    if config is None:
        return Thinking()
    if config.type == "disabled":
        return _with_budget(False, 0, template, explicit=False)
    return _with_budget(True, config.budget_tokens, template, explicit=config.budget_tokens is not None,
                        param="thinking.budget_tokens")


def _with_budget(enable: bool, budget: int | None, template: ChatTemplate, explicit: bool,
                 param: str = "reasoning_effort") -> Thinking:
    if template.thinking is None:
        if explicit:
            raise APIError(400, f"{param}: this model does not think (its vocabulary has no <think> and </think> "
                                f"tokens), so a thinking budget cannot apply; leave it out", param)
        return Thinking(enable)
    if not enable and template.has_thinking_switch:
        return Thinking(enable)  # the template closed the thinking block in the prompt already
    return Thinking(enable, budget)
