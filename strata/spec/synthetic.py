"""Synthetic drafting for benchmarks on random-weight models, where real drafts would never match.

The drafter only decides how many of a step's k drafts are accepted: a truncated geometric count
(draft j accepted with probability alpha^(j+1)) whose alpha is solved so that the mean accepted
length, drafts + bonus, is `acceptance_length`. After the target forward the runner builds the
drafts from the target's own greedy tokens with `synthetic_drafts`, so `verify_greedy` accepts
exactly that many. Step timing is real; the token ids are not meaningful. Each slot draws from a stream
of its own, started when a request takes the slot, so a request's counts do not depend on what it is
batched with (nor on whether a step was planned ahead).
"""

from __future__ import annotations

import random


class SyntheticDrafter:
    def __init__(self, acceptance_length: float, seed: int):
        if not acceptance_length >= 1.0:
            raise ValueError(f"acceptance_length counts the bonus token, so it must be >= 1, "
                             f"got {acceptance_length}")
        self.acceptance_length = acceptance_length
        self.seed = seed
        self._rng = random.Random(seed)
        self._slot_rngs: dict[int, random.Random] = {}
        self._num_slots_added = 0
        self._alpha_by_k: dict[int, float] = {}

    def add_slot(self, slot_id: int) -> None:
        """A request took the slot: a fresh stream of draws for it (the n-th request's stream is the same
        whatever the batching)."""
        self._slot_rngs[slot_id] = random.Random(f"{self.seed}/{self._num_slots_added}")
        self._num_slots_added += 1

    def remove_slot(self, slot_id: int) -> None:
        self._slot_rngs.pop(slot_id, None)

    def propose_synthetic(self, k: int, slot_id: int | None = None) -> int:
        """How many of this step's k drafts to accept, in [0, k]; mean acceptance_length - 1. `slot_id`: draw
        from that slot's stream (else from the drafter's own).

        A k too small for the mean (k < acceptance_length - 1) accepts all k drafts.
        """
        if k <= 0:
            return 0
        alpha = self._alpha(k)
        rng = self._slot_rngs.get(slot_id, self._rng)
        num_accept = 0
        while num_accept < k and rng.random() < alpha:
            num_accept += 1
        return num_accept

    def _alpha(self, k: int) -> float:
        if k not in self._alpha_by_k:
            self._alpha_by_k[k] = _solve_alpha(self.acceptance_length - 1.0, k)
        return self._alpha_by_k[k]


def _solve_alpha(mean_accepted: float, k: int) -> float:
    """alpha in [0, 1] with sum_{j=1..k} alpha^j = mean_accepted, by bisection: the sum (the mean
    of the truncated geometric count) rises monotonically from 0 at alpha 0 to k at alpha 1."""
    if mean_accepted >= k:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid ** j for j in range(1, k + 1)) < mean_accepted:
            low = mid
        else:
            high = mid
    return low


def synthetic_drafts(target_tokens: list[int], num_accept: int, k: int, vocab_size: int) -> list[int]:
    """k drafts of which exactly the first num_accept match target_tokens (the target's greedy
    token at each draft's row); every later draft is wrong: (target + 1) % vocab_size."""
    if not 0 <= num_accept <= k <= len(target_tokens):
        raise ValueError(f"need 0 <= num_accept <= k <= len(target_tokens), got num_accept={num_accept}, "
                         f"k={k}, {len(target_tokens)} target tokens")
    if vocab_size < 2:
        raise ValueError(f"a wrong draft needs vocab_size >= 2, got {vocab_size}")
    return [token if j < num_accept else (token + 1) % vocab_size
            for j, token in enumerate(target_tokens[:k])]
