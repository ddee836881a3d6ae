"""Device tensors behind the allocator: the paged KV pool (per full-attention layer, including the MTP
layer) and the recurrent-state pool (per Gated DeltaNet layer, one row per slot)."""

from __future__ import annotations

import torch


class KVPool:
    def __init__(self, layer_ids: list[int], num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        shape = (num_blocks, block_size, num_kv_heads, head_dim)  # [N_blocks, B, Hkv, D]
        self.caches = {i: (torch.zeros(shape, dtype=dtype, device=device),
                           torch.zeros(shape, dtype=dtype, device=device)) for i in layer_ids}

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
        return 2 * num_layers * block_size * num_kv_heads * head_dim * dtype.itemsize


class StatePool:
    """conv state in the model dtype, delta-rule state in float32 (it accumulates over the sequence)."""

    def __init__(self, shapes: dict[int, tuple[tuple[int, ...], tuple[int, ...]]], max_num_seqs: int,
                 dtype: torch.dtype, device: str) -> None:
        self.caches = {layer: (torch.zeros(max_num_seqs, *conv, dtype=dtype, device=device),
                               torch.zeros(max_num_seqs, *ssm, dtype=torch.float32, device=device))
                       for layer, (conv, ssm) in shapes.items()}
