"""Per-step forward context: the metadata every layer reads, built once per step by the runner.

It is passed explicitly to `model.forward` (no module-global step state). Per-sequence rows are the
slots scheduled this step, in plan order; tokens of one slot are contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ForwardContext:
    positions: torch.Tensor          # [T] long, absolute position of each token
    slot_mapping: torch.Tensor       # [T] long, flat KV index block_id * block_size + offset
    query_start_loc: torch.Tensor    # [S + 1] long, cu_seqlens of the query tokens
    seq_lens: torch.Tensor           # [S] long, context length after this step
    block_tables: torch.Tensor       # [S, max_blocks] long (padded with 0)
    state_slot_ids: torch.Tensor     # [S] long, row of each sequence in the recurrent-state pools
    has_initial_state: torch.Tensor  # [S] bool, False when the sequence starts at position 0
    query_lens: list[int]            # host copies, for loops that must not sync the device
    num_computed: list[int]
    kv_caches: dict[int, tuple[torch.Tensor, torch.Tensor]]  # layer -> ([N_blocks, B, Hkv, D] x2)
    state_caches: dict[int, tuple[torch.Tensor, torch.Tensor]]  # layer -> (conv [S_max, C, W-1], ssm [S_max, Hv, Dk, Dv])
    block_size: int = 16
    # attention splits contexts as if block_tables had at least this many columns (0: its own width)
    split_table_width: int = 0
    # Speculative verification: recurrent layers also record the state after every token, keyed by
    # layer -> (conv [T, C, W-1], ssm [T, Hv, Dk, Dv]), so spec/commit.py can roll back to any position.
    keep_window_states: bool = False
    window_states: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # Optional persistent buffers for those states (same layout, >= T rows), so CUDA graphs share them
    window_buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
    # [S] device: each sequence's real tokens where a CUDA graph layout pads sequences in place (a
    # fresh prompt padded to the layout's length); None: query_start_loc gives them (eager steps)
    real_query_lens: torch.Tensor | None = None
    # index tensors derived from the host lists above, made once per step and shared by every layer
    derived: dict = field(default_factory=dict)
    # rotary config -> the tokens' cos / sin rows, stored by the first attention layer of a forward and
    # read by the later ones (strata.kernels.rope_kv); computed values, so CausalLM.forward starts it empty
    rope_rows: dict = field(default_factory=dict)

    def cached(self, key, build):
        """build() once per step for `key` (the eager paths' per-step index layouts)."""
        if key not in self.derived:
            self.derived[key] = build()
        return self.derived[key]

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

