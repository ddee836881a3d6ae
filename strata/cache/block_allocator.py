"""Fixed-size KV block allocator with reference counts and a prefix cache. Pure Python: the
scheduler owns it and never touches tensors. Predicate, then action: `can_allocate(n)` before
`allocate(n)`.

A full block of committed tokens can be registered under its chain hash (parent hash, its tokens).
Registered blocks stay cached after their last holder frees them (ref count 0, least recently used
first out) until the space is needed; any request whose prompt starts with the same tokens takes
them read-only. Invariants: a block with ref count > 0 is never handed out again; only blocks with
ref count 0 are evicted; a lookup matches tokens exactly, not just hashes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable


def chain_hashes(token_ids: list[int], block_size: int, num_blocks: int, parent: int | None = None,
                 start_block: int = 0) -> list[int]:
    """Hashes of full blocks start_block .. num_blocks - 1 of token_ids, chained from `parent`."""
    hashes = []
    for i in range(start_block, num_blocks):
        parent = hash((parent, tuple(token_ids[i * block_size:(i + 1) * block_size])))
        hashes.append(parent)
    return hashes


class BlockAllocator:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._tokens_of: list[tuple[int, ...] | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}                       # hash -> block id
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks nobody holds, LRU first
        self.on_evict: Callable[[int, int, tuple[int, ...]], None] | None = None  # (block, hash, tokens)

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (never used, or cached and unreferenced)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def can_allocate(self, n: int) -> bool:
        return n <= self.num_free

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} KV blocks, {self.num_free} free")
        ids = []
        for _ in range(n):
            block_id = self._free.popleft() if self._free else self._evict_oldest()
            self._ref_counts[block_id] = 1
            ids.append(block_id)
        return ids

    def free(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            count = self._ref_counts[block_id]
            if count <= 0:
                raise RuntimeError(f"KV block {block_id} freed while not allocated")
            self._ref_counts[block_id] = count - 1
            if count == 1:
                if self._hash_of[block_id] is None:
                    self._free.append(block_id)
                else:
                    self._evictable[block_id] = None

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    # ---- prefix cache ------------------------------------------------------------------------------

    def lookup(self, hashes: list[int], token_ids: list[int], block_size: int) -> list[int]:
        """The cached blocks of the longest prefix of `hashes` whose tokens match exactly."""
        matched = []
        for i, h in enumerate(hashes):
            block_id = self.cached_block(h, tuple(token_ids[i * block_size:(i + 1) * block_size]))
            if block_id is None:
                break
            matched.append(block_id)
        return matched

    def cached_block(self, block_hash: int, tokens: tuple[int, ...]) -> int | None:
        block_id = self._cached.get(block_hash)
        return block_id if block_id is not None and self._tokens_of[block_id] == tokens else None

    def take(self, block_ids: list[int]) -> None:
        """Hold cached blocks found by `lookup` (read-only sharing)."""
        for block_id in block_ids:
            if self._ref_counts[block_id] == 0:
                del self._evictable[block_id]
            self._ref_counts[block_id] += 1

    def register(self, block_id: int, block_hash: int, tokens: tuple[int, ...]) -> None:
        """A held block just became full of committed tokens: make it findable. If an identical
        block is already cached, this one stays private (it is freed normally)."""
        if not self.enable_prefix_caching or block_hash in self._cached or self._hash_of[block_id] is not None:
            return
        self._cached[block_hash] = block_id
        self._hash_of[block_id] = block_hash
        self._tokens_of[block_id] = tokens

    def forget(self, block_id: int) -> int | None:
        """Make a held block unfindable (its contents are not trusted); returns its old hash."""
        block_hash = self._hash_of[block_id]
        if block_hash is not None:
            del self._cached[block_hash]
            self._hash_of[block_id] = self._tokens_of[block_id] = None
        return block_hash

    def reset_prefix_cache(self) -> None:
        """Forget every cached block nobody holds (benchmarks measure cold prompts this way)."""
        while self._evictable:
            self._free.append(self._evict_oldest(park=False))

    def _evict_oldest(self, park: bool = True) -> int:
        block_id, _ = self._evictable.popitem(last=False)
        block_hash, tokens = self._hash_of[block_id], self._tokens_of[block_id]
        del self._cached[block_hash]
        self._hash_of[block_id] = self._tokens_of[block_id] = None
        if park and self.on_evict is not None:
            self.on_evict(block_id, block_hash, tokens)
        return block_id


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)
