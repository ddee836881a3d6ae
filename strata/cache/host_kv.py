"""The host tier of the KV pool (--kv-resident-tokens): blocks shaped like the device pool's, one tensor
pair per key of `KVPool.caches` (K and V of every attention layer, int8 scales, QSA index keys), in
pinned host memory on CUDA (the attention kernel reads them over PCIe through unified addressing) and
in plain CPU memory on the CPU.

A sequence's oldest full blocks move here, in order, and its device blocks go back to the pool. Copies
only: which blocks move is the scheduler's decision (scheduler/kv_offload.py), and a host block is
private to its sequence (never shared, never in the prefix cache).
"""

from __future__ import annotations

import torch

from strata.cache.pools import KVPool, zeros
from strata.transfer import raw


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

    def offload(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, host block) pairs: the device blocks' contents, every key, into the host blocks."""
        copy_blocks(self.kv_pool.caches, [d for d, _ in pairs], self.caches, [h for _, h in pairs])

    def unpark(self, park_kv: dict, pairs: list[tuple[int, int]]) -> None:
        """(conversation-cache row, host block) pairs: a parked prefix block straight into this tier (a
        prefix hit older than the resident window never goes through the device)."""
        copy_blocks(park_kv, [r for r, _ in pairs], self.caches, [h for _, h in pairs])


def copy_blocks(src: dict, src_ids: list[int], dst: dict, dst_ids: list[int]) -> None:
    """dst[key][i][dst_ids] = src[key][i][src_ids] for both tensors of every key. From the device the
    rows come back with a blocking copy: the host tensor's index_copy_ runs on the host at once, so it
    must not read rows still in flight (this also orders the copy after the forwards queued before it)."""
    if not src_ids:
        return
    for key, pair in src.items():
        for source, target in zip(pair, dst[key]):
            if source.numel() == 0:  # the empty second tensor of an extra key (QSA's index keys)
                continue
            rows = raw(source).index_select(0, torch.tensor(src_ids, device=source.device))
            raw(target).index_copy_(0, torch.tensor(dst_ids, device=target.device), rows.to(target.device))
