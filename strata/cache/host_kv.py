"""The host tier of the KV pool (--kv-resident-tokens): blocks shaped like the device pool's, one tensor
pair per key of `KVPool.caches` (K and V of every attention layer, int8 scales, QSA index keys), in
pinned host memory on CUDA (the attention kernel reads them over PCIe through unified addressing) and
in plain CPU memory on the CPU.

A sequence's oldest full blocks move here, in order, and its device blocks go back to the pool. Copies
only: which blocks move is the scheduler's decision (scheduler/kv_offload.py), and a host block is
private to its sequence (never shared, never in the prefix cache).

On CUDA a move is queued on the current stream and the host goes on (`offload`; `settle` waits for it).
Stream order is all it needs: a freed device block is next written by a kernel or copy queued later on
the same stream (a step's KV write, a CUDA graph replay, a restore), the attention kernel reads the
host rows through that stream too, and the allocator reuses the gather's scratch only for later work on
it. What reads or writes the host tier on the host settles first: the unparks here, the eager torch
attention paths (the runner settles before building their context), and the sampler's token read that
ends every step is after the copy anyway.
"""

from __future__ import annotations

import numpy as np
import torch

from strata.cache.pools import KVPool, zeros
from strata.transfer import RowsToHost, raw


class HostKVPool:
    def __init__(self, kv_pool: KVPool, num_blocks: int) -> None:
        pin = any(k.is_cuda for k, _ in kv_pool.caches.values())

        def host_like(t: torch.Tensor) -> torch.Tensor:  # [N_host, B, ...] like t's [N_blocks, B, ...]
            shape = (num_blocks, *t.shape[1:])
            if pin or 0 in shape:  # (an extra key's second tensor is empty)
                return torch.zeros(shape, dtype=t.dtype, pin_memory=pin)
            return zeros(shape, t.dtype, "cpu")

        self.kv_pool = kv_pool
        self.num_blocks = num_blocks
        self.caches = {key: (host_like(k), host_like(v)) for key, (k, v) in kv_pool.caches.items()}
        self.offloads = RowsToHost()
        # writes into the tier, counted: `generation` goes up by one a write, `written_at[block]` is the
        # generation of the block's last write (the KV staging ring's copies made ahead check them)
        self.generation = 0
        self.written_at = np.zeros(num_blocks, dtype=np.int64)

    def written_since(self, generation: int) -> np.ndarray:
        """The host blocks written after `generation` (ids, int64)."""
        if generation == self.generation:
            return self.written_at[:0]
        return np.flatnonzero(self.written_at > generation)

    def _written(self, blocks: list[int]) -> None:
        self.generation += 1
        self.written_at[blocks] = self.generation

    def offload(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, host block) pairs: the device blocks' contents, every key, into the host blocks
        (queued on the stream from the device; see the module docstring)."""
        if pairs:
            self._written([h for _, h in pairs])
            self.offloads.queue(self.kv_pool.caches, [d for d, _ in pairs], self.caches, [h for _, h in pairs])

    def settle(self) -> None:
        """Wait until the queued offloads have landed in host memory (before the host reads or writes it)."""
        self.offloads.settle()

    def unpark(self, park_kv: dict, pairs: list[tuple[int, int]]) -> None:
        """(conversation-cache row, host block) pairs: a parked prefix block straight into this tier (a
        prefix hit older than the resident window never goes through the device). A host copy: after
        the offloads in flight (one may still be writing a host block that was freed and handed on)."""
        if not pairs:
            return
        self._written([h for _, h in pairs])
        self.settle()
        for key, pair in park_kv.items():
            for source, target in zip(pair, self.caches[key]):
                if source.numel() == 0:  # the empty second tensor of an extra key (QSA's index keys)
                    continue
                rows = raw(source).index_select(0, torch.tensor([r for r, _ in pairs]))
                raw(target).index_copy_(0, torch.tensor([h for _, h in pairs]), rows)
