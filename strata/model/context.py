"""What a forward reads: the step's metadata (immutable, built by the runner's input builder) and a
per-forward scratch object (owned and reset by the runner).

`ForwardContext` is passed explicitly to `model.forward` (no module-global step state). Per-sequence
rows are the slots scheduled this step, in plan order; tokens of one slot are contiguous. Nothing a
layer computes is stored on the context itself: memoised index layouts, the shared rotary rows and the
per-token recurrent states of a verification window live in `ForwardScratch`, which the owner resets
before every forward or capture, so nothing computed for one step can leak into another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ForwardScratch:
    """Working state of one forward. `derived` memoises per-step index tensors (`cached`);
    `rope_rows` maps a rotary config to the tokens' cos / sin rows, stored by the first attention layer
    and read by the later ones (the Triton kernel's under "rows", the torch path's under "torch"); `window_states` is what recurrent layers record on verification windows,
    layer -> (conv [T, C, W-1], ssm [T, Hv, Dk, Dv]), read by spec/commit.py; `window_buffers` are
    persistent buffers for those states (same layout, >= T rows) that CUDA graphs share: they survive
    `reset`."""

    derived: dict = field(default_factory=dict)
    rope_rows: dict = field(default_factory=dict)
    window_states: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    window_buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None

    def reset(self, keep_derived: bool = False) -> ForwardScratch:
        """Forget what a forward computed. `keep_derived`: keep the memoised index tensors, for a graph
        capture after its warm-up run of the same layout (they come from host lists, which a capture
        cannot copy to the device; the rotary rows depend on the positions and are made anew)."""
        self.rope_rows, self.window_states = {}, {}
        if not keep_derived:
            self.derived = {}
        return self

    def cached(self, key, build):
        """build() once per forward for `key` (the eager paths' per-step index layouts)."""
        if key not in self.derived:
            self.derived[key] = build()
        return self.derived[key]


@dataclass(frozen=True)
class ForwardContext:
    positions: torch.Tensor          # [T] long, absolute position of each token
    slot_mapping: torch.Tensor       # [T] long, flat KV index block_id * block_size + offset
    query_start_loc: torch.Tensor    # [S + 1] long, cu_seqlens of the query tokens
    seq_lens: torch.Tensor           # [S] long, context length after this step
    block_tables: torch.Tensor       # [S, max_blocks] long (padded with 0)
    state_slot_ids: torch.Tensor     # [S] long, row of each sequence in the recurrent-state pools
    has_initial_state: torch.Tensor  # [S] bool, False when the sequence starts at position 0
    query_lens: tuple[int, ...]      # host copies, for loops that must not sync the device
    num_computed: tuple[int, ...]
    # layer -> ([N_blocks, B, Hkv, D] x2); int8 KV: also kv_scale_key(layer) -> ([N_blocks, B, Hkv] x2)
    kv_caches: dict[int, tuple[torch.Tensor, torch.Tensor]]
    state_caches: dict[int, tuple[torch.Tensor, torch.Tensor]]  # layer -> (conv [S_max, C, W-1], ssm [S_max, Hv, Dk, Dv])
    scratch: ForwardScratch
    block_size: int = 16
    # attention splits contexts as if block_tables had at least this many columns (0: its own width)
    split_table_width: int = 0
    # Speculative verification: recurrent layers also record the state after every token in
    # scratch.window_states, so spec/commit.py can roll back to any position.
    keep_window_states: bool = False
    # [S] device: each sequence's real tokens where a CUDA graph layout pads sequences in place (a
    # fresh prompt padded to the layout's length); None: query_start_loc gives them (eager steps)
    real_query_lens: torch.Tensor | None = None
    # KV beyond VRAM (--kv-resident-tokens): each sequence's first blocks sit in the host tier, whose
    # tensors have kv_caches' keys and block shapes. block_tables keeps every position's column (-1 at
    # the host ones); attention reads those positions from host_kv_caches through the host tables.
    host_kv_caches: dict | None = None
    host_block_ids: tuple[tuple[int, ...], ...] = ()   # host copies, per sequence (empty: all on the device)
    host_block_tables: torch.Tensor | None = None      # [S, Wh] long on the device (padded with 0)
    host_block_counts: torch.Tensor | None = None      # [S] long on the device: len(host_block_ids[i])
    # --kv-staging-layers: host_kv_caches is then a device ring the step's host blocks are copied into, layer
    # by layer (runner/kv_staging.py); attention calls its before/after hooks around its read
    kv_staging: object | None = None
    # a CUDA graph's capture: the model's variant of the step's layout (model.graph_variant), "" for the plain
    # one (and for eager steps, where the model decides from the host lists)
    graph_variant: str = ""

    @property
    def has_host_blocks(self) -> bool:
        return any(self.host_block_ids)

    def cached(self, key, build):
        return self.scratch.cached(key, build)

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)
