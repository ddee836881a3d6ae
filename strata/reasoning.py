"""Reasoning budgets: a model's thinking tokens (`<think>` / `</think>` in its vocabulary) and the per-request
state machine that says when the end of thinking must be forced. Torch-free: the server asks whether a
model can think at all (a budget on one that cannot is a 400), the sampler keeps one `ThinkingBudget` per
slot and turns `next_forced()` into a one-hot row of logits (strata/sample/sampler.py).

The budget counts every token generated inside an open thinking block (after `<think>`, before
`</think>`), over the whole output. Once it is spent, the next tokens are forced: `</think>`, then what the
chat template writes after it (Qwen3's "\\n\\n"), and generation goes on as the answer, in which `<think>`
is then banned (a spent budget opens no new block).
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ThinkingTokens:
    open_id: int
    close_id: int
    end_ids: tuple[int, ...]   # forced once the budget is spent: close_id, then the template's separator


def thinking_tokens(tokenizer) -> ThinkingTokens | None:
    """The tokenizer's `<think>` and `</think>` tokens (each must be one token of the vocabulary), or None
    for a model that does not think. The separator after `</think>` is read from the chat template (what
    its assistant turns put there), tokenized together with `</think>`."""
    if tokenizer is None:
        return None
    vocab = tokenizer.get_vocab()
    open_id, close_id = vocab.get(THINK_OPEN), vocab.get(THINK_CLOSE)
    if open_id is None or close_id is None:
        return None
    source = getattr(tokenizer, "chat_template", None) or ""
    separator = next((s for s in ("\n\n", "\n") if THINK_CLOSE + s in source), "")
    end_ids = tuple(tokenizer.encode(THINK_CLOSE + separator, add_special_tokens=False))
    if not end_ids or end_ids[0] != close_id:  # the tokenizer merged </think> with what follows
        end_ids = (close_id, *tokenizer.encode(separator, add_special_tokens=False))
    return ThinkingTokens(open_id, close_id, end_ids)


@dataclass
class ThinkingBudget:
    """One request's thinking so far. Start it on the prompt (`starts_open`: the template opened a
    thinking block in the generation prompt), then `advance` it by every committed output token."""

    tokens: ThinkingTokens
    budget: int
    is_open: bool = False
    num_thinking: int = 0                # tokens generated inside thinking blocks so far
    pending: tuple[int, ...] = ()        # forced tokens still to come after a forced </think>

    @classmethod
    def start(cls, tokens: ThinkingTokens, budget: int, prompt_token_ids: list[int],
              output_token_ids: list[int] = ()) -> ThinkingBudget:
        state = cls(tokens, budget, is_open=_opens_thinking(tokens, prompt_token_ids))
        for token_id in output_token_ids:  # a preempted request resumes where its output stopped
            state.advance(token_id)
        return state

    def next_forced(self) -> int | None:
        """The token the next position must be, or None when the model is free."""
        if self.pending:
            return self.pending[0]
        if self.is_open and self.num_thinking >= self.budget:
            return self.tokens.close_id
        return None

    def next_banned(self) -> int | None:
        """The token the next position must not be (<think> once the budget is spent), or None."""
        spent = not self.is_open and not self.pending and self.num_thinking >= self.budget
        return self.tokens.open_id if spent else None

    def can_decode_ahead(self) -> bool:
        """Whether the position after the next one is forced or banned the same whatever the next token is,
        so it may be sampled before that token is known (--async-scheduling): nothing is pending, and either
        no block is open (a <think> now would open one below its budget, or is banned) or the open one has
        room for the next token and one more."""
        return not self.pending and (not self.is_open or self.num_thinking + 1 < self.budget)

    def advance(self, token_id: int) -> None:
        if self.pending:
            self.pending = self.pending[1:] if token_id == self.pending[0] else ()
        elif self.is_open:
            if token_id == self.tokens.close_id:
                forced = self.num_thinking >= self.budget
                self.is_open = False
                self.pending = self.tokens.end_ids[1:] if forced else ()
            else:
                self.num_thinking += 1
        elif token_id == self.tokens.open_id:
            self.is_open = True

    def rules_along(self, draft_token_ids: list[int]) -> list[tuple[int | None, int | None]]:
        """(forced, banned) token at each of the 1 + k positions of a verification window whose drafts are
        `draft_token_ids`: position j follows the first j drafts. The state itself is unchanged (commit
        advances it by the tokens accepted)."""
        walker = ThinkingBudget(self.tokens, self.budget, self.is_open, self.num_thinking, self.pending)
        rules = [(walker.next_forced(), walker.next_banned())]
        for token_id in draft_token_ids:
            walker.advance(token_id)
            rules.append((walker.next_forced(), walker.next_banned()))
        return rules


def _opens_thinking(tokens: ThinkingTokens, token_ids: list[int]) -> bool:
    """Whether the ids end inside a thinking block (the last <think> comes after the last </think>)."""
    for token_id in reversed(token_ids):
        if token_id == tokens.close_id:
            return False
        if token_id == tokens.open_id:
            return True
    return False
