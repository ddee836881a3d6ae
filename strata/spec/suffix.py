"""Prompt-lookup / suffix-match drafting: propose the tokens that followed the most recent earlier
occurrence of the slot's longest matching suffix. No model and no torch.

Per slot it keeps the committed tokens (prompt + output) and an index n-gram -> start of the latest
occurrence that already has a following token. An n-gram enters the index only once its next token
is committed, so the current suffix never finds itself; `propose` is O(max_ngram² + k) dict work
however long the context. `extend` takes committed (accepted) tokens only, never drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _SlotHistory:
    token_ids: list[int] = field(default_factory=list)
    last_start: dict[tuple[int, ...], int] = field(default_factory=dict)


class SuffixDrafter:
    def __init__(self, max_ngram: int = 4, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, "
                             f"max_ngram={max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._slots: dict[int, _SlotHistory] = {}

    def add_slot(self, slot_id: int, token_ids: list[int]) -> None:
        """A request enters `slot_id` with its prompt (+ outputs so far when it resumes)."""
        self._slots[slot_id] = _SlotHistory()
        self.extend(slot_id, token_ids)

    def remove_slot(self, slot_id: int) -> None:
        self._slots.pop(slot_id, None)

    def extend(self, slot_id: int, new_token_ids: list[int]) -> None:
        """Append committed tokens; each one gives the n-grams ending just before it a continuation."""
        history = self._history_of(slot_id)
        token_ids, last_start = history.token_ids, history.last_start
        for token_id in new_token_ids:
            end = len(token_ids)
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                last_start[tuple(token_ids[end - n:end])] = end - n
            token_ids.append(token_id)

    def propose(self, slot_id: int, k: int, pending: list[int] | tuple = ()) -> list[int]:
        """Up to k tokens that followed the longest (then most recent) earlier match of the suffix;
        fewer when that continuation reaches the end of the history, [] when nothing matches. `pending`: tokens
        not committed yet taken as following the history (a verification step's drafts in flight): the suffix of
        history + pending is looked up among the history's n-grams, and the continuation may run on into them."""
        history = self._history_of(slot_id)
        token_ids = history.token_ids
        if k <= 0:
            return []
        tail = token_ids[-self.max_ngram:] + list(pending)  # no copy of a long history
        end = len(token_ids) + len(pending)
        for n in range(min(self.max_ngram, end), self.min_ngram - 1, -1):
            start = history.last_start.get(tuple(tail[len(tail) - n:]))
            if start is not None:
                first, last = start + n, min(start + n + k, end)
                held = len(token_ids)
                return token_ids[first:last] + list(pending[max(first - held, 0):max(last - held, 0)])
        return []

    def tokens_of(self, slot_id: int) -> list[int]:
        """The slot's committed tokens (read only)."""
        return self._history_of(slot_id).token_ids

    def _history_of(self, slot_id: int) -> _SlotHistory:
        history = self._slots.get(slot_id)
        if history is None:
            raise KeyError(f"slot {slot_id} holds no request; call add_slot before using it")
        return history
