"""Fixed-size KV block allocator with reference counts. Pure Python: the scheduler owns it and never
touches tensors. Predicate, then action: `can_allocate(n)` before `allocate(n)`."""

from __future__ import annotations

from collections import deque


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"asked for {n} KV blocks, {len(self._free)} free")
        ids = [self._free.popleft() for _ in range(n)]
        for block_id in ids:
            self._ref_counts[block_id] = 1
        return ids

    def free(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            count = self._ref_counts[block_id]
            if count <= 0:
                raise RuntimeError(f"KV block {block_id} freed while not allocated")
            self._ref_counts[block_id] = count - 1
            if count == 1:
                self._free.append(block_id)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
