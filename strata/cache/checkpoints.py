"""Recurrent-state checkpoints for hybrid models: which block-boundary states are saved, in a bounded
pool with least-recently-used eviction. Pure Python (the scheduler's index); the runner holds the
tensors (`pools.CheckpointPool`) and copies rows in and out when the plan says so.

A prefix hit on a model with Gated DeltaNet layers is usable only up to a block boundary whose state
was checkpointed: KV can be shared block by block, recurrent state cannot be rebuilt from KV.
"""

from __future__ import annotations

from collections import OrderedDict


class CheckpointIndex:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.on_evict = None  # (key, row) -> None: called before an evicted row is reused
        self._by_key: OrderedDict[int, int] = OrderedDict()   # chain hash at a block boundary -> pool row
        self._free = list(range(capacity - 1, -1, -1))
        self.pinned: set[int] = set()  # keys of pinned prefixes (scheduler/pins.py): evicted last

    def __len__(self) -> int:
        return len(self._by_key)

    def lookup(self, key: int) -> int | None:
        row = self._by_key.get(key)
        if row is not None:
            self._by_key.move_to_end(key)
        return row

    def contains(self, key: int) -> bool:
        return key in self._by_key

    def try_reserve(self, key: int) -> int | None:
        """A pool row for a new checkpoint under `key`, evicting the least recently used one (one that no
        pinned prefix keeps, while there is one); None
        when the key is already saved. Reservations happen in `Scheduler.update`, after the runner has
        done the step's restores, and in `Scheduler.schedule_ahead`, whose step in flight restores
        nothing (a plan with new slots is never followed by one planned ahead): a row being restored
        is never reused under it."""
        if self.capacity == 0 or key in self._by_key:
            return None
        row = self.reserve_unnamed()
        if row is not None:
            self._by_key[key] = row
        return row

    def reserve_unnamed(self) -> int | None:
        """A pool row for a save whose key is not known yet (a state saved on the device only if the step in
        flight lands on a block boundary, scheduler/plan_ahead.py): out of the index until `name` gives it a key or
        `release_unnamed` frees it, so no eviction takes it meanwhile. None when every row is reserved so."""
        if self.capacity == 0:
            return None
        if not self._free:
            if not self._by_key:
                return None
            old_key = next((k for k in self._by_key if k not in self.pinned), next(iter(self._by_key)))
            row = self._by_key.pop(old_key)
            if self.on_evict is not None:
                self.on_evict(old_key, row)
            self._free.append(row)
        return self._free.pop()

    def name(self, row: int, key: int) -> bool:
        """An unnamed row's save ran: it holds the checkpoint `key` from now on -> False (and the row freed) when
        `key` is saved already."""
        if key in self._by_key:
            self._free.append(row)
            return False
        self._by_key[key] = row
        return True

    def release_unnamed(self, row: int) -> None:
        self._free.append(row)

    def release(self, key: int) -> None:
        row = self._by_key.pop(key, None)
        if row is not None:
            self._free.append(row)

    def release_row(self, row: int) -> int | None:
        """Forget the checkpoint held in `row` (its save never ran: the step failed) -> its key."""
        key = next((k for k, r in self._by_key.items() if r == row), None)
        if key is not None:
            self.release(key)
        return key
