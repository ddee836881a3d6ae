"""numpy copies of the runner's per-slot block lists, converted again only when a list changed.

A slot's block list at a 128K-token context holds 8,192 ids; converting it (~0.3 ms) on every decode step
made the host work of a step grow with the context. A step compares each list with the copy it converted
last (a C loop, ~10 µs at 8,192 ids) and reuses that array when they are equal, which they are on 15 of 16
decode steps. Equality decides, so a key shared by two lists costs conversions, never a wrong table. Keys are
(id of the dict, slot): the dicts must live as long as the cache (the runner's tables, the staging rows).
"""

from __future__ import annotations

import numpy as np


_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False


class TableArrays:
    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[list[int], np.ndarray]] = {}

    def get(self, table_dict: dict, slot_id: int, default: list[int] | tuple = ()) -> np.ndarray:
        """table_dict[slot_id] (or `default`) as an int64 array; read-only (it may be shared with later steps)."""
        values = table_dict.get(slot_id, default)
        if not values:  # (not cached: a throwaway empty dict would leave an entry under its id)
            return _EMPTY
        key = (id(table_dict), slot_id)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == values:
            return hit[1]
        array = np.asarray(values, dtype=np.int64)
        array.flags.writeable = False
        self._cache[key] = (list(values), array)
        return array
