"""The conversation cache's index: KV blocks and recurrent-state checkpoints evicted from the device,
parked in host RAM (bounded, least recently used first out) so a later request that starts with a
parked conversation copies it back instead of recomputing it. Pure Python; the runner holds the
host tensors (`pools.HostParkPool`) and does the copies the plan lists."""

from __future__ import annotations

from collections import OrderedDict


class ParkIndex:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_key: OrderedDict[int, int] = OrderedDict()   # hash -> host row
        self._tokens: dict[int, tuple[int, ...] | None] = {}   # host row -> tokens (exact matching)
        self._free = list(range(capacity - 1, -1, -1))
        # rows a plan will copy back before its parks run: never reused until the plan is sent
        self.pinned: set[int] = set()

    def __len__(self) -> int:
        return len(self._by_key)

    def lookup(self, key: int, tokens: tuple[int, ...] | None = None) -> int | None:
        row = self._by_key.get(key)
        if row is None or (tokens is not None and self._tokens[row] != tokens):
            return None
        self._by_key.move_to_end(key)
        return row

    def try_reserve(self, key: int, tokens: tuple[int, ...] | None = None) -> int | None:
        """A host row for `key` (evicting the least recently used); None if already parked or no room."""
        if self.capacity == 0 or key in self._by_key:
            return None
        if not self._free:
            victim = next((k for k, r in self._by_key.items() if r not in self.pinned), None)
            if victim is None:
                return None
            self._free.append(self._by_key.pop(victim))
        row = self._free.pop()
        self._by_key[key] = row
        self._tokens[row] = tokens
        return row

    def forget(self, key: int) -> None:
        row = self._by_key.pop(key, None)
        if row is not None:
            self._free.append(row)
