"""Roll a verification window's recurrent state back to its last accepted token, on the device.

A verify pass leaves each slot's pool row at the state after its window's *last* token and records the
state after every token in a [S * n, ...] tensor (window i's rows i * n .. i * n + n - 1). A slot that
accepted all n - 1 drafts already holds its answer in the pool, so only the others are copied: row
i * n + accepted[i] -> pool row slots[i], read straight from the recorded rows (no gathered copy first).
With `accepted` on the device (a CUDA graph's verdicts), which slots copy is decided in the kernel.

A hybrid model has two or three such tensors a recurrent layer (36 Gated DeltaNet layers in Qwen3-Next-80B), so
`restore_all_accepted` / `restore_all_rows` copy every layer's rows in one launch: a table of the tensors' addresses
on the device, each row copied as 4-byte words.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: restore_accepted_rows_ref still works
    triton = tl = None

_BLOCK = 4096  # values a program copies
logger = logging.getLogger(__name__)


def restore_accepted_rows_ref(recorded: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor,
                              accepted: torch.Tensor, window: int) -> None:
    """recorded [>= S * n, ...], pool [S_max, ...] (rows shaped alike), slots / accepted [S] int64, n = window:
    pool[slots[i]] := recorded[i * n + accepted[i]] for every i with accepted[i] < n - 1."""
    _copy_rows(recorded, pool, slots, _accepted_rows(accepted, window))


def _accepted_rows(accepted: torch.Tensor, window: int) -> torch.Tensor:
    """accepted [S] -> each slot's recorded row (i * n + accepted[i]), or -1 where it accepted its whole window."""
    rows = torch.arange(accepted.shape[0], device=accepted.device) * window + accepted      # [S]
    return torch.where(accepted < window - 1, rows, -1)


def _copy_rows(recorded: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """pool[slots[j]] := recorded[rows[j]] where rows[j] >= 0, in torch (on CUDA without a host sync: a row not
    copied is written with itself)."""
    if not pool.is_cuda:
        keep = (rows >= 0).nonzero().flatten()                                           # [P'] the rows to copy
        pool.index_copy_(0, slots[keep], recorded[rows[keep]].to(pool.dtype))
        return
    keep = (rows >= 0).view(-1, *([1] * (pool.dim() - 1)))
    pool.index_copy_(0, slots, torch.where(keep, recorded[rows.clamp(min=0)].to(pool.dtype), pool[slots]))


def restore_accepted_rows(recorded: torch.Tensor, pool: torch.Tensor, slots: torch.Tensor, accepted: torch.Tensor,
                          window: int) -> None:
    """restore_accepted_rows_ref without a host sync on CUDA (one launch, the recorded rows read once, the fully
    accepted slots skipped in the kernel); the reference elsewhere."""
    if not pool.is_cuda:
        restore_accepted_rows_ref(recorded, pool, slots, accepted, window)
        return
    row_numel = pool[0].numel()
    assert recorded[0].numel() == row_numel and recorded.shape[0] >= slots.shape[0] * window
    if recorded.dtype != pool.dtype or not recorded.is_contiguous() or not pool.is_contiguous():
        _copy_rows(recorded, pool, slots, _accepted_rows(accepted, window))  # rows of another layout
        return
    grid = (slots.shape[0], triton.cdiv(row_numel, _BLOCK))
    _restore_kernel[grid](recorded, pool, slots, accepted, window, row_numel, BLOCK=_BLOCK)


StatePair = tuple[torch.Tensor, torch.Tensor]  # (recorded [rows, ...], pool [S_max, ...]) rows shaped alike


def restore_all_accepted(pairs: list[StatePair], slots: torch.Tensor, accepted: torch.Tensor, window: int,
                         joined: bool | None = None) -> None:
    """restore_accepted_rows for every (recorded, pool) pair, in one launch where the rows allow it. `joined`: use
    the one-launch kernel (None: on CUDA; True also runs it in Triton's interpreter on the CPU)."""
    _restore_all(pairs, slots, accepted, window, slots.is_cuda if joined is None else joined)


def restore_all_rows(pairs: list[StatePair], slots: torch.Tensor, rows: torch.Tensor,
                     joined: bool | None = None, words: list[int] | None = None) -> None:
    """For every pair: pool[slots[j]] := recorded[rows[j]] (slots, rows [P] int64 on the pools' device; rows[j] < 0:
    nothing for j), in one launch where the rows allow it (`joined` as for restore_all_accepted; `words`: the pairs'
    row_words, kept by a caller whose pairs do not change)."""
    _restore_all(pairs, slots, rows, None, slots.is_cuda if joined is None else joined, words)


def _restore_all(pairs: list[StatePair], slots: torch.Tensor, index: torch.Tensor, window: int | None,
                 joined: bool, words: list[int] | None = None) -> None:
    """index: each slot's accepted count (window given) or its recorded row (window None)."""
    def one(recorded: torch.Tensor, pool: torch.Tensor) -> None:
        if window is not None:
            restore_accepted_rows(recorded, pool, slots, index, window)
        else:
            _copy_rows(recorded, pool, slots, index)

    if not pairs or slots.shape[0] == 0:
        return
    words = words if words is not None else [row_words(recorded, pool) for recorded, pool in pairs]
    kept = [(pair, n) for pair, n in zip(pairs, words) if n]
    table = _address_table(kept, slots.device) if joined and len(kept) > 1 and _joined_builds is not False else None
    for pair, n in zip(pairs, words):
        if table is None or not n:
            one(*pair)
    if table is not None and not _launch_joined(table, slots.contiguous(), index.contiguous(), window, kept):
        for pair, _ in kept:
            one(*pair)


_joined_builds: bool | None = None  # whether the joined kernel built here (None: not launched yet)


def _launch_joined(table: torch.Tensor, slots: torch.Tensor, index: torch.Tensor, window: int | None,
                   kept: list[tuple[StatePair, int]]) -> bool:
    """Launch the joined kernel -> False when its first launch in this process failed (a Triton that cannot build
    it: warned once, and every later call copies per tensor)."""
    global _joined_builds
    grid = (slots.shape[0], len(kept), -(-max(n for _, n in kept) // _BLOCK))
    try:
        _restore_all_kernel[grid](table, slots, index, window or 0, len(kept), FROM_ACCEPTED=window is not None,
                                  BLOCK=_BLOCK)
    except Exception:
        if _joined_builds:
            raise
        _joined_builds = False
        logger.warning("the one-launch state copy failed to build; copying each state tensor on its own",
                       exc_info=True)
        return False
    _joined_builds = True
    return True


def row_words(recorded: torch.Tensor, pool: torch.Tensor) -> int:
    """4-byte words a row of this pair has when the joined kernel can copy it (same dtype, contiguous, rows of the
    same whole number of words at word-aligned addresses), else 0."""
    # (sizes from nbytes and leading dims, no shape slices: this runs for every state tensor of an eager step)
    pool_rows, recorded_rows = pool.shape[0], recorded.shape[0]
    row_bytes = pool.nbytes // pool_rows if pool_rows else 0
    if not row_bytes or row_bytes % 4 or recorded.dtype != pool.dtype or recorded.nbytes != row_bytes * recorded_rows \
            or not recorded.is_contiguous() or not pool.is_contiguous() or recorded.data_ptr() % 4 \
            or pool.data_ptr() % 4:
        return 0
    return row_bytes // 4


_tables: OrderedDict[tuple, torch.Tensor] = OrderedDict()  # address tables on the device, by their contents
_captured: set[tuple] = set()                              # those a CUDA graph reads: never dropped
_MAX_TABLES = 64


def _address_table(joined: list[tuple[StatePair, int]], device: torch.device) -> torch.Tensor | None:
    """[3, T] int64 on the device: the recorded tensors' addresses, the pools', the words a row; kept by contents
    (the verification graphs' and the eager steps' buffers repeat). None while a CUDA graph is being captured and
    the table is new: a capture cannot copy it from the host (the caller launches per pair)."""
    key = (str(device), *((recorded.data_ptr(), pool.data_ptr(), n) for (recorded, pool), n in joined))
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    table = _tables.get(key)
    if table is None:
        if capturing:
            return None
        table = torch.tensor([[r.data_ptr() for (r, _), _ in joined], [p.data_ptr() for (_, p), _ in joined],
                              [n for _, n in joined]], dtype=torch.int64)
        # through pinned memory: a copy from pageable memory would make the host wait for the device's queue
        table = table.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else table.to(device)
        _tables[key] = table
        for old in [k for k in _tables if k not in _captured][:max(0, len(_tables) - len(_captured) - _MAX_TABLES)]:
            del _tables[old]
    else:
        _tables.move_to_end(key)
    if capturing:
        _captured.add(key)
    return table


if triton is not None:

    @triton.jit
    def _restore_all_kernel(table_ptr, slots_ptr, index_ptr, window, num_tensors, FROM_ACCEPTED: tl.constexpr,
                            BLOCK: tl.constexpr):
        i, tensor, part = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        index = tl.load(index_ptr + i)
        if FROM_ACCEPTED:
            copy = index < window - 1  # a slot that accepted everything holds the window's last state already
            row = (i * window + index).to(tl.int64)
        else:
            copy = index >= 0
            row = index.to(tl.int64)
        words = tl.load(table_ptr + 2 * num_tensors + tensor)
        if copy and part * BLOCK < words:
            recorded = tl.load(table_ptr + tensor).to(tl.pointer_type(tl.int32))
            pool = tl.load(table_ptr + num_tensors + tensor).to(tl.pointer_type(tl.int32))
            slot = tl.load(slots_ptr + i).to(tl.int64)
            offs = part * BLOCK + tl.arange(0, BLOCK)
            ok = offs < words
            values = tl.load(recorded + row * words + offs, mask=ok)
            tl.store(pool + slot * words + offs, values, mask=ok)


    @triton.jit
    def _restore_kernel(recorded_ptr, pool_ptr, slots_ptr, accepted_ptr, window, row_numel, BLOCK: tl.constexpr):
        i, part = tl.program_id(0), tl.program_id(1)
        accepted = tl.load(accepted_ptr + i)
        if accepted < window - 1:  # a slot that accepted everything holds the window's last state already
            slot = tl.load(slots_ptr + i).to(tl.int64)
            row = (i * window + accepted).to(tl.int64)
            offs = part * BLOCK + tl.arange(0, BLOCK)
            ok = offs < row_numel
            values = tl.load(recorded_ptr + row * row_numel + offs, mask=ok)
            tl.store(pool_ptr + slot * row_numel + offs, values, mask=ok)
