"""Persistent device input buffers for graph-replayed steps, filled by one host-to-device copy per step.

Every per-step value a CUDA graph reads lives here: one flat int64 device buffer holds token ids,
positions, KV slot mapping, query offsets, context lengths, real tokens per slot, state rows, "has
initial state" flags, the number of real (unpadded) token rows and block tables (last, so a step copies
only the rows it uses), mirrored by a pinned host buffer that the runner fills with numpy. Rows past the
step's real slots are padding: they read and write a scratch KV block and a scratch recurrent-state row
that no request owns; so are the rows of a slot past its own tokens (a prompt padded up to its graph's
length: causal attention keeps them out of the real rows, and the recurrent layers stop each slot's
state after its real tokens, `ForwardContext.real_query_lens`).

With a host KV tier (--kv-resident-tokens) every graph is captured reading it, and each step also fills
each slot's host block count; the block table row then carries the slot's host blocks in its first
`count` columns (where the runner's table holds -1) and its device blocks after them, so one table
serves as both `block_tables` and `host_block_tables` (the kernel picks a column's tier by its index
against the count). Padding rows and captures have no host blocks: zero host blocks read exactly like none.
"""

from __future__ import annotations

import numpy as np
import torch

from strata.model.context import ForwardContext, ForwardScratch
from strata.runner.table_arrays import TableArrays
from strata.spec.verify_ahead import moved_windows
from strata.types import ScheduledSlot


class GraphInputs:
    def __init__(self, max_slots: int, max_tokens_per_slot: int, max_blocks_per_slot: int, block_size: int,
                 scratch_block: int, scratch_state_row: int, device: str, max_prompt_rows: int = 0,
                 host_tier: bool = False) -> None:
        self.host_tier = host_tier  # whether steps may read a host KV tier (the graphs then always do)
        self.max_slots, self.max_tokens = max_slots, max(max_slots * max_tokens_per_slot, max_prompt_rows)
        self.width, self.block_size = max_blocks_per_slot, block_size
        self.scratch_block, self.scratch_state_row = scratch_block, scratch_state_row
        sizes = {"input_ids": self.max_tokens, "positions": self.max_tokens, "slot_mapping": self.max_tokens,
                 "query_start_loc": max_slots + 1, "seq_lens": max_slots, "query_lens": max_slots,
                 "state_slot_ids": max_slots,
                 "has_initial_state": max_slots, "num_real_rows": 1, "host_block_counts": max_slots * host_tier,
                 "block_tables": max_slots * max_blocks_per_slot}
        self.offsets, total = {}, 0
        for name, size in sizes.items():
            self.offsets[name] = (total, total + size)
            total += size
        pin = torch.cuda.is_available() and str(device).startswith("cuda")
        # two host buffers, used in turn: with --async-scheduling the next step is filled while the
        # copy of this one may still be queued; a buffer is rewritten only after its last copy ran
        self._hosts = [torch.zeros(total, dtype=torch.long, pin_memory=pin) for _ in range(2)]
        self._copied: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0
        self.host = self._hosts[0]
        self.host_np = self.host.numpy()
        self.device_flat = torch.zeros(total, dtype=torch.long, device=device)
        self.has_initial_bool = torch.zeros(max_slots, dtype=torch.bool, device=device)
        self.num_real_rows = self._device("num_real_rows")  # [1] token rows before the padding
        self.table_arrays = TableArrays()

    def _host(self, name: str) -> np.ndarray:
        start, end = self.offsets[name]
        return self.host_np[start:end]

    def _device(self, name: str) -> torch.Tensor:
        start, end = self.offsets[name]
        return self.device_flat[start:end]

    def device_buffer(self, name: str) -> torch.Tensor:
        """One input's device buffer (a view of the flat one every graph reads), e.g. "input_ids" [max tokens]."""
        return self._device(name)

    def fill(self, scheduled: list[ScheduledSlot], block_tables: dict[int, list[int]], num_slots: int,
             tokens_per_slot: int, host_tables: dict[int, list[int]] | None = None) -> None:
        """Write the step's real slots, then padding rows up to num_slots, and copy them to the device.
        num_slots=0 marks every row as padding (used to capture without touching any request's state).
        A slot with fewer than tokens_per_slot tokens (a fresh prompt) is padded in place. `host_tables`:
        each slot's blocks in the host KV tier (host_tier only; a slot not listed has none)."""
        self._next_host()
        n, bs, count = tokens_per_slot, self.block_size, len(scheduled)
        ids, pos, mapping = self._host("input_ids"), self._host("positions"), self._host("slot_mapping")
        qsl, seq_lens, query_lens = self._host("query_start_loc"), self._host("seq_lens"), self._host("query_lens")
        rows, has_init = self._host("state_slot_ids"), self._host("has_initial_state")
        tables = self._host("block_tables").reshape(self.max_slots, self.width)
        # per slot only its block table row and its numbers in lists; the rest at once for every slot's n rows
        computed, new, tokens = [], [], []
        for i, work in enumerate(scheduled):
            table = self.table_arrays.get(block_tables, work.slot_id)
            tables[i, :len(table)], tables[i, len(table):] = table, self.scratch_block
            computed.append(work.num_computed_tokens)
            new.append(work.num_new_tokens)
            tokens += work.token_ids
        tables[count:num_slots] = self.scratch_block
        padding = num_slots - count                       # padding slots: n rows each from position 0
        computed = np.array(computed + [0] * padding, dtype=np.int64)                       # [S]
        used = num_slots * n
        positions = computed if n == 1 else (computed[:, None] + np.arange(n)).ravel()      # [S * n]
        pos[:used] = positions
        # a step's own rows write their own blocks (clamped for padding rows, whose slot ids come next)
        row_starts = np.arange(0, num_slots * self.width, self.width)
        block_of = np.minimum(positions // bs, self.width - 1) + (row_starts if n == 1 else np.repeat(row_starts, n))
        mapping[:used] = tables.ravel()[block_of] * bs + positions % bs
        if len(tokens) == used:
            ids[:used] = tokens
        else:  # padding rows (a prompt's past its tokens, padding slots'): token 0, written to the scratch block
            real = (np.arange(n) < np.array(new + [0] * padding)[:, None]).ravel()          # [S * n]
            ids[:used] = 0
            ids[:used][real] = tokens
            pad_rows = np.flatnonzero(~real)
            mapping[pad_rows] = self.scratch_block * bs + pad_rows % n % bs
        seq_lens[:num_slots] = computed + n
        query_lens[:num_slots] = new + [n] * padding
        rows[:num_slots] = [work.slot_id for work in scheduled] + [self.scratch_state_row] * padding
        has_init[:num_slots] = computed > 0
        if self.host_tier:  # (after the slot mapping: a step writes only device blocks)
            self._fill_host_tables(scheduled, host_tables or {}, tables, num_slots)
        qsl[:num_slots + 1] = np.arange(num_slots + 1) * n
        self._host("num_real_rows")[0] = sum(work.num_new_tokens for work in scheduled)
        self._copy(num_slots)

    def fill_rows(self, slots: list[ScheduledSlot | None], rows: list[int], block_tables: dict[int, list[int]],
                  host_tables: dict[int, list[int]] | None = None) -> None:
        """`fill` for a layout whose slots take different row counts (a mixed graph: decode or verification
        windows, then fresh prompts, cuda_graphs.mixed_layout): slot i takes rows[i] rows after slot i - 1's; a
        None slot is padding (anywhere among them). A slot with fewer tokens than its rows is padded in place."""
        self._next_host()
        bs, num_slots = self.block_size, len(rows)
        lens = np.asarray(rows, dtype=np.int64)                                                  # [S]
        starts = np.zeros(num_slots + 1, dtype=np.int64)                                         # [S + 1]
        np.cumsum(lens, out=starts[1:])
        used = int(starts[-1])
        ids, pos, mapping = self._host("input_ids"), self._host("positions"), self._host("slot_mapping")
        tables = self._host("block_tables").reshape(self.max_slots, self.width)
        computed = np.zeros(num_slots, dtype=np.int64)
        new = lens.copy()                                 # a padding slot's rows all count as its own
        state_rows = np.full(num_slots, self.scratch_state_row, dtype=np.int64)
        real_slot = np.zeros(num_slots, dtype=bool)
        tokens = []
        for i, work in enumerate(slots):
            if work is None:
                tables[i] = self.scratch_block
                continue
            table = self.table_arrays.get(block_tables, work.slot_id)
            tables[i, :len(table)], tables[i, len(table):] = table, self.scratch_block
            computed[i], new[i], state_rows[i], real_slot[i] = work.num_computed_tokens, work.num_new_tokens, \
                work.slot_id, True
            tokens += work.token_ids
        slot_of_row = np.repeat(np.arange(num_slots), lens)                                     # [T]
        offset = np.arange(used) - starts[slot_of_row]                                           # [T]
        positions = computed[slot_of_row] + offset
        pos[:used] = positions
        block_of = np.minimum(positions // bs, self.width - 1) + slot_of_row * self.width
        mapping[:used] = tables.ravel()[block_of] * bs + positions % bs
        real = real_slot[slot_of_row] & (offset < new[slot_of_row])                              # [T]
        ids[:used] = 0
        ids[:used][real] = tokens
        padding = ~real  # padding rows (a prompt's past its tokens, padding slots') write the scratch block
        mapping[:used][padding] = self.scratch_block * bs + offset[padding] % bs
        self._host("seq_lens")[:num_slots] = computed + lens
        self._host("query_lens")[:num_slots] = new
        self._host("state_slot_ids")[:num_slots] = state_rows
        self._host("has_initial_state")[:num_slots] = computed > 0
        if self.host_tier:
            self._fill_host_tables(slots, host_tables or {}, tables, num_slots)
        self._host("query_start_loc")[:num_slots + 1] = starts
        self._host("num_real_rows")[0] = int(real.sum())
        self._copy(num_slots)

    def _next_host(self) -> None:
        """Switch to the other host buffer (its copy two steps ago finished: long done in practice)."""
        self._turn ^= 1
        if self._copied[self._turn] is not None:
            self._copied[self._turn].synchronize()
        self.host = self._hosts[self._turn]
        self.host_np = self.host.numpy()

    def _copy(self, num_slots: int) -> None:
        """The host buffer up to the layout's block table rows, to the device."""
        used = self.offsets["block_tables"][0] + num_slots * self.width
        self.device_flat[:used].copy_(self.host[:used], non_blocking=True)
        if self.device_flat.is_cuda:
            self._copied[self._turn] = torch.cuda.Event()
            self._copied[self._turn].record()

    def _fill_host_tables(self, scheduled: list[ScheduledSlot | None], host_tables: dict[int, list[int]],
                          tables: np.ndarray, num_slots: int) -> None:
        """Each slot's host blocks into its table row's first columns (the runner's -1 there) and their
        count; padding rows (and None slots) count none."""
        counts = self._host("host_block_counts")
        counts[:num_slots] = 0
        for i, work in enumerate(scheduled):
            if work is not None:
                host = self.table_arrays.get(host_tables, work.slot_id)
                tables[i, :len(host)], counts[i] = host, len(host)

    def shift(self, delta: torch.Tensor, num_slots: int, tokens_per_slot: int) -> None:
        """After `fill`: move the first len(delta) slots' windows by delta [R] positions (int64 on the device:
        a verification step planned before the one it follows was read, as if that one accepted all its drafts;
        delta = accepted - drafts <= 0). Positions, context lengths and the KV slot mapping follow (the block
        tables already hold the blocks of the unshifted window, which end at or past the shifted one)."""
        rows = delta.shape[0] * tokens_per_slot
        tables = self._device("block_tables").view(self.max_slots, self.width)[:num_slots]  # [S, W]
        moved = moved_windows(self._device("positions")[:rows], self._device("seq_lens")[:delta.shape[0]], tables,
                              delta, self.block_size)
        for name, values in zip(("positions", "seq_lens", "slot_mapping"), moved):
            self._device(name)[:values.shape[0]].copy_(values)

    def feed_input_ids(self, token_ids: torch.Tensor) -> None:
        """Overwrite the first len(token_ids) input ids on the device after `fill` (tokens another
        step sampled and the host has not read: the copy is ordered after it on the stream)."""
        self._device("input_ids")[:token_ids.shape[0]].copy_(token_ids)

    def context(self, num_slots: int, tokens_per_slot: int, kv_caches: dict, state_caches: dict,
                keep_window_states: bool, scratch: ForwardScratch,
                scheduled: list[ScheduledSlot] | None = None, host_kv_caches: dict | None = None,
                host_tables: dict[int, list[int]] | None = None,
                kv_staging=None, rows: list[int] | None = None) -> tuple[torch.Tensor, ForwardContext]:
        """Views of the buffers for a layout (what a graph captures); with `rows` (each slot's row count, a layout
        `fill_rows` wrote) the layout is that one, num_slots and tokens_per_slot unused, and `scheduled` its slots
        in place (None for padding, whose host copies count its rows as new tokens). The bool flags are derived on the
        device from the int64 copy by the caller's captured work (see `derive_flags`). `scheduled`: the
        real slots of a replayed step, whose host copies of the lengths (and host blocks, `host_tables`)
        the context then carries (a capture has none: the eager torch paths that read them never run
        inside a graph). `host_kv_caches`: the host KV tier (host_tier only), or with `kv_staging` its
        device ring (runner/kv_staging.py), whose hooks the attention layers then call."""
        if rows is not None:
            num_slots, t = len(rows), sum(rows)
            slots = scheduled if scheduled is not None else [None] * num_slots
            query_lens = tuple(r if w is None else w.num_new_tokens for w, r in zip(slots, rows))
            num_computed = tuple(0 if w is None else w.num_computed_tokens for w in slots)
        elif scheduled is None:
            t = num_slots * tokens_per_slot
            query_lens, num_computed = (tokens_per_slot,) * num_slots, (0,) * num_slots
        else:
            t = num_slots * tokens_per_slot
            query_lens = tuple(w.num_new_tokens for w in scheduled)
            num_computed = tuple(w.num_computed_tokens for w in scheduled)
        block_tables = self._device("block_tables").view(self.max_slots, self.width)[:num_slots]  # [S, W]
        host = {}
        if self.host_tier and host_kv_caches is not None:
            host_ids = tuple(() if w is None else tuple((host_tables or {}).get(w.slot_id, ())) for w in scheduled or ())
            host = {"host_kv_caches": host_kv_caches, "host_block_ids": host_ids,
                    "host_block_tables": block_tables,  # the same table: its first count columns are host blocks
                    "host_block_counts": self._device("host_block_counts")[:num_slots],           # [S]
                    "kv_staging": kv_staging}
        ctx = ForwardContext(
            positions=self._device("positions")[:t],
            slot_mapping=self._device("slot_mapping")[:t],
            query_start_loc=self._device("query_start_loc")[:num_slots + 1],
            seq_lens=self._device("seq_lens")[:num_slots],
            block_tables=block_tables,
            state_slot_ids=self._device("state_slot_ids")[:num_slots],
            has_initial_state=self.has_initial_bool[:num_slots],
            real_query_lens=self._device("query_lens")[:num_slots],
            query_lens=query_lens,
            num_computed=num_computed,
            kv_caches=kv_caches,
            state_caches=state_caches,
            scratch=scratch,
            block_size=self.block_size,
            keep_window_states=keep_window_states,
            **host,
        )
        return self._device("input_ids")[:t], ctx

    def derive_flags(self, num_slots: int) -> None:
        """has_initial_state as bool, from its int64 copy (a device op, so graphs capture it)."""
        torch.ne(self._device("has_initial_state")[:num_slots], 0, out=self.has_initial_bool[:num_slots])
