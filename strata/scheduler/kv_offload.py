"""KV beyond VRAM, the scheduler's half (--kv-resident-tokens N): which blocks of a sequence move to the
host tier, and when. Pure Python; the runner does the copies the plan lists (cache/host_kv.py).

Before a step computes `num_new` tokens of a sequence, each of its blocks that lies wholly before the
newest N tokens of the context after the step, and is already computed, moves to the host tier (in
order: the host blocks are always the sequence's first ones). Its device block is freed at once; a block
that the prefix cache knows stays findable there (its contents stay valid until it is evicted) and the
host copy is private. With prompt chunks and verification windows of at most N tokens, a sequence then
holds at most ceil((N + lookahead) / B) + 1 device blocks. Host blocks are never rewritten: they hold
positions below the computed length, and rejected drafts only ever lie past it.
"""

from __future__ import annotations

from strata.cache.block_allocator import BlockAllocator
from strata.scheduler.request_state import RequestState


class KVOffload:
    def __init__(self, allocator: BlockAllocator, num_host_blocks: int, block_size: int,
                 resident_tokens: int) -> None:
        if num_host_blocks < 1:
            raise ValueError("kv_resident_tokens needs a host KV pool of at least one block (raise kv_host_mib)")
        self.allocator = allocator
        self.host = BlockAllocator(num_host_blocks, enable_prefix_caching=False)
        self.block_size = block_size
        self.resident_tokens = resident_tokens

    def blocks_due(self, num_computed: int, num_new: int, num_host: int) -> int:
        """How many more leading blocks may leave the device before a step of `num_new` tokens (bounded by
        the free host blocks: without one, a block just stays on the device)."""
        last = min(num_computed, num_computed + num_new - self.resident_tokens) // self.block_size
        return max(0, min(last - num_host, self.host.num_free))

    def move(self, state: RequestState, num_new: int) -> list[tuple[int, int]]:
        """Move the running `state`'s due blocks to the host tier -> (device block, host block) copies."""
        count = self.blocks_due(state.num_computed_tokens, num_new, len(state.host_block_ids))
        if count == 0:
            return []
        moved, hosts = state.block_ids[:count], self.host.allocate(count)
        del state.block_ids[:count]
        state.host_block_ids.extend(hosts)
        self.allocator.free(moved)
        return list(zip(moved, hosts))

    def release(self, state: RequestState) -> None:
        self.host.free(state.host_block_ids)
        state.host_block_ids = []
