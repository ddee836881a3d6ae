"""Device tensors behind the allocator: the paged KV pool (per full-attention layer, including the MTP
layer), the recurrent-state pool (per Gated DeltaNet layer, one row per slot) and the pool of saved
recurrent-state checkpoints."""

from __future__ import annotations

import math

import numpy as np
import torch

from strata.config import kv_scale_key
from strata.kernels.kv_quant import SCALE_DTYPE
from strata.kernels.state_rollback import restore_all_rows, row_words
from strata.transfer import RowsToHost, index_tensor, raw


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """torch.zeros, except that on the CPU the pages stay unmapped until first written: numpy's zeroed
    allocation (calloc, an anonymous mapping for large sizes) in place of torch's allocate-and-fill, so a
    KV pool sized for every slot at full length costs resident memory only as requests fill it."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * dtype.itemsize
    return torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(dtype).view(shape)


class KVPool:
    """`extra_keys`: further per-token caches paged with the same blocks (a model's `index_key_layers`,
    QSA's index keys): key -> width, stored as (keys [N_blocks, B, 1, width], an empty [N_blocks, B, 1, 0])
    so every copy of a layer's (K, V) pair (parking, restoring) carries them too. K and V are stored in
    `kv_dtype` (the model's `dtype` by default, float8 for fp8 KV, int8 for int8 KV); the extra keys in
    `dtype`. Int8 K and V get their float32 scales (strata/kernels/kv_quant.py) the same way: under
    kv_scale_key(layer), the pair (K scales, V scales) [N_blocks, B, Hkv] each, copied with the blocks."""

    def __init__(self, layer_ids: list[int], num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str, extra_keys: dict | None = None,
                 kv_dtype: torch.dtype | None = None) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        shape = (num_blocks, block_size, num_kv_heads, head_dim)  # [N_blocks, B, Hkv, D]
        kv_dtype = kv_dtype or dtype
        self.caches = {i: (zeros(shape, kv_dtype, device), zeros(shape, kv_dtype, device)) for i in layer_ids}
        if kv_dtype == torch.int8:
            self.caches |= {kv_scale_key(i): (zeros(shape[:3], SCALE_DTYPE, device),
                                              zeros(shape[:3], SCALE_DTYPE, device)) for i in layer_ids}
        for key, width in (extra_keys or {}).items():
            keys = zeros((num_blocks, block_size, 1, width), dtype, device)
            self.caches[key] = (keys, keys[..., :0])

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
        """K and V of one block in every layer, in `dtype` (int8: one byte a value and 4 a vector's scale)."""
        vector_bytes = head_dim * dtype.itemsize + (SCALE_DTYPE.itemsize if dtype == torch.int8 else 0)
        return 2 * num_layers * block_size * num_kv_heads * vector_bytes


class StatePool:
    """conv state in the model dtype, delta-rule state in float32 (it accumulates over the sequence)."""

    def __init__(self, shapes: dict[int, tuple[tuple[int, ...], tuple[int, ...]]], max_num_seqs: int,
                 dtype: torch.dtype, device: str) -> None:
        self.caches = {layer: (torch.zeros(max_num_seqs, *conv, dtype=dtype, device=device),
                               torch.zeros(max_num_seqs, *ssm, dtype=torch.float32, device=device))
                       for layer, (conv, ssm) in shapes.items()}


class CheckpointPool:
    """Saved recurrent states: per Gated DeltaNet layer, [capacity] rows shaped like the state pool's."""

    def __init__(self, state_pool: StatePool, capacity: int) -> None:
        self.caches = {layer: (conv.new_zeros(capacity, *conv.shape[1:]), ssm.new_zeros(capacity, *ssm.shape[1:]))
                       for layer, (conv, ssm) in state_pool.caches.items()} if capacity else {}
        self.state_pool = state_pool
        # (pool -> checkpoints) and (checkpoints -> pool) tensor pairs of every layer, with their rows' words
        saving = [(raw(s), raw(d)) for layer, tensors in self.caches.items()
                  for s, d in zip(state_pool.caches[layer], tensors)]
        self._pairs = {"save": saving, "restore": [(d, s) for s, d in saving]}
        self._words = [row_words(s, d) for s, d in saving]

    def save(self, slot_ids: list[int], rows: list[int]) -> None:
        self._copy_on_device("save", slot_ids, rows)

    def restore(self, rows: list[int], slot_ids: list[int]) -> None:
        self._copy_on_device("restore", rows, slot_ids)

    def save_where(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """slots, rows [P] int64 on the device: row rows[j] := slot slots[j]'s state where slots[j] >= 0 (decided on
        the device: a verification step planned ahead saves a slot only if its window starts on a block boundary)."""
        restore_all_rows(self._pairs["save"], rows, slots, words=self._words)

    def _copy_on_device(self, direction: str, src_rows: list[int], dst_rows: list[int]) -> None:
        """Rows between the state pool and the checkpoints, every layer's in one launch on CUDA (a hybrid model has
        two state tensors a recurrent layer; Qwen3-Next-80B 36 such layers)."""
        if not src_rows or not self._pairs[direction]:
            return
        device = self._pairs[direction][0][0].device
        restore_all_rows(self._pairs[direction], index_tensor(dst_rows, device), index_tensor(src_rows, device),
                         words=self._words)

    @staticmethod
    def _copy(src: dict, src_rows: list[int], dst: dict, dst_rows: list[int]) -> None:
        """dst[layer][i][dst_rows] = src[layer][i][src_rows] for both tensors of every layer."""
        if not src_rows:
            return
        for layer, (src_conv, src_ssm) in src.items():
            dst_conv, dst_ssm = dst[layer]
            index_src = index_tensor(src_rows, src_conv.device)  # no host wait for the step in flight
            index_dst = index_tensor(dst_rows, dst_conv.device)
            # non_blocking only towards the device: from pinned host memory the copy back overlaps with the
            # host's work, stream-ordered before the device's index_copy_; towards the host, torch would
            # return pinned memory still being written while the host's index_copy_ already reads it (parks
            # go through transfer.rows_to_host instead)
            to_device = dst_conv.device.type != "cpu"
            for d, s in ((dst_conv, src_conv), (dst_ssm, src_ssm)):
                raw(d).index_copy_(0, index_dst, raw(s)[index_src].to(d.device, non_blocking=to_device))


class HostParkPool:
    """Host copies of KV blocks and checkpoints (pinned memory when the device is a GPU, so the
    copies back can run asynchronously). Parking is queued on the stream and the host goes on (a
    synchronous copy to the host would wait for the step in flight: a hybrid model parks a checkpoint
    every few decode steps); what reads these rows on the host settles first."""

    def __init__(self, kv_pool: KVPool, checkpoints: CheckpointPool, num_block_rows: int,
                 num_checkpoint_rows: int) -> None:
        pin = any(k.is_cuda for k, _ in (*kv_pool.caches.values(), *checkpoints.caches.values()))

        def host_like(t: torch.Tensor, rows: int) -> torch.Tensor:
            return torch.zeros(rows, *t.shape[1:], dtype=t.dtype, pin_memory=pin)

        self.kv_pool, self.checkpoints = kv_pool, checkpoints
        self.kv = {layer: (host_like(k, num_block_rows), host_like(v, num_block_rows))
                   for layer, (k, v) in kv_pool.caches.items()} if num_block_rows else {}
        self.states = {layer: (host_like(c, num_checkpoint_rows), host_like(s, num_checkpoint_rows))
                       for layer, (c, s) in checkpoints.caches.items()} if num_checkpoint_rows else {}
        self.parks = RowsToHost()

    def park_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, host row) pairs: device -> host, queued."""
        if pairs:
            self.parks.queue(self.kv_pool.caches, [b for b, _ in pairs], self.kv, [r for _, r in pairs])

    def park_checkpoints(self, pairs: list[tuple[int, int]]) -> None:
        """(checkpoint row, host row) pairs: device -> host, queued."""
        if pairs:
            self.parks.queue(self.checkpoints.caches, [d for d, _ in pairs], self.states, [h for _, h in pairs])

    def settle(self) -> None:
        """Wait until the queued parks have landed in host memory (before the host reads these rows)."""
        self.parks.settle()

    def restore_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """(host row, device block) pairs: host -> device (the rows are gathered on the host)."""
        if pairs:
            self.settle()
            CheckpointPool._copy(self.kv, [r for r, _ in pairs], self.kv_pool.caches, [b for _, b in pairs])

    def restore_checkpoint(self, host_row: int, slot_id: int) -> None:
        self.settle()
        CheckpointPool._copy(self.states, [host_row], self.checkpoints.state_pool.caches, [slot_id])
