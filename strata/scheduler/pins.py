"""Pinned prefixes: prompt blocks a request asked to keep (`Request.pin_prefix`, the API's
`strata_pin_prefix`) stay in the prefix cache until unpinned (a request with pin_prefix False over the same
prefix) or until their time to live passes. Pure Python; no tensors.

A pin holds one reference of its own on each pinned block, so the allocator never evicts it (only blocks
with ref count 0 are evicted) and every request still finds and shares it. On hybrid models the
recurrent-state checkpoints at pinned block boundaries are kept from eviction too. At most `max_blocks`
blocks are pinned at once: a pin that would pass the bound keeps only its leading blocks that fit.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from strata.cache.block_allocator import BlockAllocator
from strata.cache.checkpoints import CheckpointIndex


class PinnedPrefixes:
    def __init__(self, allocator: BlockAllocator, max_blocks: int, ttl_s: float,
                 checkpoints: CheckpointIndex | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.allocator = allocator
        self.max_blocks = max_blocks
        self.ttl_s = ttl_s
        self.checkpoints = checkpoints
        self.clock = clock
        self._pinned: dict[int, tuple[int, float]] = {}   # chain hash -> (block id, expiry time)
        self._next_expiry = float("inf")

    def __len__(self) -> int:
        return len(self._pinned)

    def is_pinned(self, block_hash: int) -> bool:
        return block_hash in self._pinned

    def pin(self, hashes: list[int], block_ids: list[int]) -> int:
        """Pin (or refresh) the leading blocks of a prefix: hashes[i] is cached as block_ids[i]. Stops at the
        first block that would pass max_blocks. -> the number of blocks of the prefix pinned now."""
        expiry = self.clock() + self.ttl_s
        for i, (block_hash, block_id) in enumerate(zip(hashes, block_ids)):
            if block_hash not in self._pinned:
                if len(self._pinned) >= self.max_blocks:
                    return i
                self.allocator.take([block_id])
                if self.checkpoints is not None:
                    self.checkpoints.pinned.add(block_hash)
            self._pinned[block_hash] = (block_id, expiry)
        self._next_expiry = min(self._next_expiry, expiry)
        return len(hashes)

    def unpin(self, hashes: list[int]) -> int:
        """Release the pins of these blocks (they stay cached, evictable like any other). -> how many."""
        released = [h for h in hashes if h in self._pinned]
        for block_hash in released:
            self._release(block_hash)
        return len(released)

    def expire(self) -> None:
        """Release the pins whose time to live has passed (cheap when none has)."""
        now = self.clock()
        if now < self._next_expiry:
            return
        for block_hash in [h for h, (_, expiry) in self._pinned.items() if expiry <= now]:
            self._release(block_hash)
        self._next_expiry = min((expiry for _, expiry in self._pinned.values()), default=float("inf"))

    def _release(self, block_hash: int) -> None:
        block_id, _ = self._pinned.pop(block_hash)
        self.allocator.free([block_id])
        if self.checkpoints is not None:
            self.checkpoints.pinned.discard(block_hash)
