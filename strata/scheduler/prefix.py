"""Prefix reuse for the scheduler: matching a new request against cached blocks (and, on hybrid
models, recurrent-state checkpoints), registering blocks as they fill with committed tokens, deciding
where prompt chunks end and when a checkpoint is saved. Pure Python; no tensors.

Only full blocks of committed tokens are shared, and a match always leaves at least one prompt token
to compute (that token's logits are needed), so no request ever writes into a shared block. A request
with `cache_prefix` False (the API's `strata_checkpoint: false`) reads the cache but adds nothing to it;
one with `pin_prefix` pins its prompt's blocks when it ends (pins.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.cache.block_allocator import BlockAllocator, chain_hashes
from strata.cache.checkpoints import CheckpointIndex
from strata.cache.host_park import ParkIndex
from strata.scheduler.pins import PinnedPrefixes
from strata.scheduler.request_state import RequestState


@dataclass
class PrefixMatch:
    # per matched block in order: ("device", block id) shared read-only, or ("parked", host row)
    blocks: list[tuple[str, int]] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)          # chain hashes of the matched blocks
    checkpoint_row: int | None = None                        # hybrid: saved state on the device ...
    checkpoint_host_row: int | None = None                   # ... or parked in host RAM

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def device_blocks(self) -> list[int]:
        return [i for kind, i in self.blocks if kind == "device"]

    @property
    def parked_rows(self) -> list[int]:
        return [i for kind, i in self.blocks if kind == "parked"]


class PrefixManager:
    def __init__(self, allocator: BlockAllocator, block_size: int, checkpoints: CheckpointIndex | None,
                 checkpoint_every: int, parked_blocks: ParkIndex | None = None,
                 parked_checkpoints: ParkIndex | None = None) -> None:
        self.allocator = allocator
        self.block_size = block_size
        self.checkpoints = checkpoints          # None: no recurrent state, any block boundary is usable
        self.checkpoint_every = max(checkpoint_every // block_size, 1) * block_size
        self.parked_blocks = parked_blocks      # None: no conversation cache in host RAM
        self.parked_checkpoints = parked_checkpoints
        self.pins: PinnedPrefixes | None = None  # set by the scheduler

    @property
    def enabled(self) -> bool:
        return self.allocator.enable_prefix_caching

    def match(self, state: RequestState) -> PrefixMatch:
        """The longest usable known prefix of `state`'s tokens, block by block from the device cache
        or from blocks parked in host RAM; on hybrid models cut back to the last boundary with a
        saved state. Nothing for a request whose prompt logprobs are still to come (every position is scored)."""
        if not self.enabled or state.skip_prefix_cache or state.wants_prompt_logprobs:
            state.skip_prefix_cache = False
            return PrefixMatch()
        tokens = state.all_token_ids()
        return self.match_tokens(tokens, (len(tokens) - 1) // self.block_size)

    def match_tokens(self, tokens: list[int], num_blocks: int) -> PrefixMatch:
        """The longest usable known prefix within the first `num_blocks` full blocks of `tokens` (a
        request's match leaves its last token to compute; a session save takes every full block)."""
        hashes = chain_hashes(tokens, self.block_size, num_blocks)
        blocks = []
        for i, block_hash in enumerate(hashes):
            block_tokens = self._block_tokens(tokens, i)
            block_id = self.allocator.cached_block(block_hash, block_tokens)
            if block_id is not None:
                blocks.append(("device", block_id))
                continue
            row = None if self.parked_blocks is None else self.parked_blocks.lookup(block_hash, block_tokens)
            if row is None:
                break
            blocks.append(("parked", row))
        if self.checkpoints is None:
            return PrefixMatch(blocks, hashes[:len(blocks)])
        for n in range(len(blocks), 0, -1):  # the longest match that ends at a saved state
            row = self.checkpoints.lookup(hashes[n - 1])
            host_row = None if row is not None or self.parked_checkpoints is None \
                else self.parked_checkpoints.lookup(hashes[n - 1])
            if row is not None or host_row is not None:
                return PrefixMatch(blocks[:n], hashes[:n], row, host_row)
        return PrefixMatch()

    def _block_tokens(self, tokens: list[int], i: int) -> tuple[int, ...]:
        return tuple(tokens[i * self.block_size:(i + 1) * self.block_size])

    def register_computed(self, state: RequestState) -> None:
        """Make every block that is now full of computed, committed tokens findable."""
        if not self.enabled or not state.request.cache_prefix:
            return
        # computed positions past the kept tokens (accepted past max_tokens, dropped) hold no token to hash
        num_full = min(min(state.num_computed_tokens, state.num_tokens) // self.block_size, state.num_blocks)
        first = len(state.block_hashes)
        if num_full <= first:  # (most steps: checked before any token list is built, whatever the context)
            return
        bs = self.block_size
        tokens = state.token_range(first * bs, num_full * bs)  # only the new blocks' tokens
        parent = state.block_hashes[-1] if state.block_hashes else None
        new = chain_hashes(tokens, bs, num_full - first, parent)
        num_host = len(state.host_block_ids)
        for i, block_hash in enumerate(new, start=first):
            if i >= num_host:  # a block already in the host tier left the device unregistered: private
                self.allocator.register(state.block_ids[i - num_host], block_hash,
                                        tuple(tokens[(i - first) * bs:(i - first + 1) * bs]))
        state.block_hashes.extend(new)

    def saves_checkpoints(self, state: RequestState) -> bool:
        """Whether `state`'s recurrent states are checkpointed at all (a hybrid model, prefix caching on, the
        request's prefix cached)."""
        return self.checkpoints is not None and self.enabled and state.request.cache_prefix

    def checkpoint_due(self, state: RequestState, ahead: bool = False) -> int | None:
        """The key under which to save the slot's state now, if its computed length sits on a
        boundary worth keeping: every `checkpoint_every` prompt tokens, the prompt's last full
        block, and during decoding every boundary (the newest one serves the next turn). `ahead`:
        for the length one past the computed tokens (an overlapped decode step's token in flight,
        whose input is known), the block it completes hashed before its commit registers it."""
        if not self.saves_checkpoints(state):
            return None
        computed = state.num_computed_tokens + (1 if ahead else 0)
        index = computed // self.block_size - 1       # the block that ends at `computed`
        if computed == 0 or computed % self.block_size:
            return None
        if len(state.block_hashes) > index:
            key = state.block_hashes[index]
        elif ahead and len(state.block_hashes) == index and state.num_tokens >= computed:
            parent = state.block_hashes[-1] if state.block_hashes else None
            block = state.token_range(index * self.block_size, computed)  # the one block it completes
            key = chain_hashes(block, self.block_size, 1, parent)[0]
        else:
            return None
        prompt_len = len(state.prompt_token_ids)
        wanted = (computed % self.checkpoint_every == 0 or computed == self._last_prompt_boundary(state)
                  or computed > prompt_len)
        return key if wanted and not self.checkpoints.contains(key) else None

    def pin_prompt(self, state: RequestState) -> None:
        """Pin the request's full prompt blocks that are computed and cached (its slot still holds them)."""
        if self.pins is None or not self.enabled:
            return
        prompt = state.prompt_token_ids
        hashes, block_ids = [], []
        for i, block_hash in enumerate(state.block_hashes[:len(prompt) // self.block_size]):
            block_id = self.allocator.cached_block(block_hash, self._block_tokens(prompt, i))
            if block_id is None:
                break
            hashes.append(block_hash)
            block_ids.append(block_id)
        self.pins.pin(hashes, block_ids)

    def unpin_prompt(self, prompt_token_ids: list[int]) -> None:
        """Release the pins on this prompt's full blocks (pin_prefix False)."""
        if self.pins is not None and len(self.pins):
            self.pins.unpin(chain_hashes(prompt_token_ids, self.block_size, len(prompt_token_ids) // self.block_size))

    def chunk_length(self, state: RequestState, num_new: int) -> int:
        """Hybrid models end prompt chunks on checkpoint boundaries, so states exist where later
        prefix hits can use them. Attention-only models take the chunk as it is."""
        if self.checkpoints is None or not self.enabled:
            return num_new
        start = state.num_computed_tokens
        end = start + num_new
        for boundary in (self._next_periodic(start), self._last_prompt_boundary(state)):
            if start < boundary < end:
                end = boundary
        if end < state.num_tokens and end % self.block_size and end - end % self.block_size > start:
            end -= end % self.block_size  # a budget-limited chunk stops on a block boundary
        return end - start

    def _next_periodic(self, start: int) -> int:
        return (start // self.checkpoint_every + 1) * self.checkpoint_every

    def _last_prompt_boundary(self, state: RequestState) -> int:
        return len(state.prompt_token_ids) // self.block_size * self.block_size
