"""Sessions on disk: a conversation's cached prefix (its KV blocks in every paged layer, and on hybrid
models the recurrent-state checkpoint where it ends) saved to a file, and put back into the prefix
cache so the request that continues the conversation after a restart reads only its new tokens. What
is saved is exactly what the prefix cache would give a request with those tokens.

Work is split so that the engine loop is never held for long: on the loop, with the caches settled
(EngineCore.settle), only bookkeeping (hold a prefix's blocks: a held block is never evicted or written;
take fresh blocks; register them) and copies of one tensor (one layer's K or V) at a time, between
steps; on a worker thread, the file. Device tensors are touched on the loop only: a CUDA graph capture
there forbids CUDA work from other threads. session_jobs.py drives the steps. A file is refused unless
its fingerprint (model config, weights, dtype, block size, cache layout) equals this engine's. Under a pipeline
split a file holds every stage's layers: stage 0 asks the stage that owns a tensor for its rows, or sends them to it
(runner/session_rows.py), so files move between a split engine and one process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import time

import torch

from strata.cache import session_file
from strata.cache.block_allocator import chain_hashes
from strata.runner import session_rows

FORMAT = "strata-session/1"
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
_HEAD_BYTES = 16 << 20
_TAIL_BYTES = 64 << 10


class SessionError(Exception):
    """A save or restore the engine refuses; `status` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ---- fingerprint -----------------------------------------------------------------------------------

def model_layout(engine) -> dict[str, dict[str, list]]:
    """{"kv": ..., "state": ...}: name -> [per-row shape, dtype] of the whole model's paged and recurrent tensors
    (every stage's under a pipeline split: gathered when the engine was built)."""
    stage = engine.runner.stage
    layouts = stage.layouts if stage is not None else [session_rows.layout(engine.runner)]
    return {part: {n: v for layout in layouts for n, v in layout[part].items()} for part in ("kv", "state")}


def kv_names(engine) -> list[str]:
    """Every paged tensor a session file holds: K and V per layer (MTP and QSA keys too), all stages'."""
    return list(model_layout(engine)["kv"])


def _owner(engine, tensor_name: str, part: str = "kv") -> int:
    """The pipeline stage whose caches hold the tensor (0: this process's, also without a split)."""
    stage = engine.runner.stage
    if stage is None:
        return 0
    return next(rank for rank, layout in enumerate(stage.layouts) if tensor_name in layout[part])


def _weight_files(spec: str) -> list[str]:
    from strata.weights.source import BUNDLED_MODELS, bundled_model_path

    path = bundled_model_path(spec) if spec in BUNDLED_MODELS else spec
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(_WEIGHT_SUFFIXES))
    return [path]


def _file_identity(path: str) -> list:
    """[file name, size, hash of its tensor metadata and of its last 64 KiB of data]. The metadata is a
    safetensors file's JSON header, else the file's first 16 MiB (a GGUF's metadata and tensor infos);
    the sampled data tells apart files of one shape (two fine-tunes named model.safetensors)."""
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if path.endswith(".safetensors"):
            (length,) = struct.unpack("<Q", f.read(8))
            digest.update(f.read(min(length, size)))
        else:
            digest.update(f.read(_HEAD_BYTES))
        f.seek(max(size - _TAIL_BYTES, 0))
        digest.update(f.read(_TAIL_BYTES))
    return [os.path.basename(path), size, digest.hexdigest()[:16]]


def weights_identity(spec: str, seed: int) -> dict:
    """Which weights: their files (random weights: the spec and the seed they are drawn with)."""
    if spec.startswith("random:"):
        return {"spec": spec, "seed": seed}
    return {"files": [_file_identity(p) for p in _weight_files(spec)]}


def fingerprint(engine) -> dict:
    """What a session file must match to be restored here (JSON values: compared with a file's header).
    Reads weight files' heads and tails: call it off the loop."""
    from strata.weights.source import DEFAULT_MODEL

    layout = model_layout(engine)
    return json.loads(json.dumps({
        "architecture": engine.model_config.architecture, "model_config": dataclasses.asdict(engine.model_config),
        "weights": weights_identity(engine.config.model or DEFAULT_MODEL, engine.config.runner.seed),
        "dtype": engine.dtype, "block_size": engine.scheduler.block_size,
        "kv_layout": layout["kv"], "state_layout": layout["state"]}, default=str))


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def check_header(header: dict, current: dict, filename: str) -> None:
    """Raise SessionError (409) naming the first differences between a file's fingerprint and ours."""
    if header.get("format") != FORMAT:
        raise SessionError(409, f"{filename} has session format {header.get('format')!r}; this server reads {FORMAT!r}")
    ours, theirs = _flatten(current), _flatten(header.get("fingerprint") or {})
    differences = [f"{key} (file: {theirs.get(key)!r}, this server: {ours.get(key)!r})"
                   for key in sorted(ours.keys() | theirs.keys()) if ours.get(key) != theirs.get(key)]
    if differences:
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        raise SessionError(409, f"{filename} was saved from another model or configuration: {shown}. Restore it on a "
                                f"server running the model and options it was saved with")


# ---- save: hold the prefix, copy it tensor by tensor, let go (loop); write the file (thread) -------

@dataclasses.dataclass
class HeldPrefix:
    """A cached prefix held for a save: its device blocks referenced; what the loop may reuse once it moves
    on (host rows of parked blocks, the checkpoint row) already copied."""

    token_ids: list[int]                  # whole blocks
    blocks: list[tuple[str, int]]         # PrefixMatch.blocks: ("device", block id) or ("parked", host row)
    parked: dict[str, torch.Tensor]       # name -> [N_parked, B, ...] the parked blocks' copies, in order
    states: dict[str, torch.Tensor]       # name -> [1, ...] the recurrent state after the last token

    @property
    def device_blocks(self) -> list[int]:
        return [i for kind, i in self.blocks if kind == "device"]


def hold_prefix(engine, token_ids: list[int]) -> HeldPrefix:
    """Loop, caches settled: the cached prefix of `token_ids` (every whole block the prefix cache holds,
    cut back to the last checkpoint on hybrid models), held until release_prefix."""
    scheduler, runner = engine.scheduler, engine.runner
    _check_cache_on(scheduler)
    match = scheduler.prefix.match_tokens(token_ids, len(token_ids) // scheduler.block_size)
    if match.num_blocks == 0:
        raise SessionError(404, "nothing of this conversation is in the prefix cache: send it (a chat or completion "
                                "request) first, then save it")
    checkpoint = ("device", match.checkpoint_row) if match.checkpoint_row is not None else \
        ("host", match.checkpoint_host_row) if match.checkpoint_host_row is not None else None
    rows = (match.parked_rows, checkpoint)
    parked, states = session_rows.held(runner, *rows)
    for rank in range(1, runner.stage.world if runner.stage is not None else 1):  # the other stages' tensors
        their_parked, their_states = runner.stage.ask(rank, session_rows.SessionRows("held", rows))
        parked, states = parked | their_parked, states | their_states
    scheduler.allocator.take(match.device_blocks)
    return HeldPrefix(token_ids[:match.num_blocks * scheduler.block_size], match.blocks, parked, states)


def release_prefix(engine, held: HeldPrefix) -> None:
    engine.scheduler.allocator.free(held.device_blocks)


def copy_out(engine, held: HeldPrefix, tensor_name: str) -> torch.Tensor:
    """Loop: one paged tensor's blocks of the held prefix, in order -> [N_blocks, B, ...] in host memory (from the
    pipeline stage that holds it)."""
    device = [(i, b) for i, (kind, b) in enumerate(held.blocks) if kind == "device"]
    ids, owner = [b for _, b in device], _owner(engine, tensor_name)
    rows = session_rows.blocks(engine.runner, tensor_name, ids) if owner == 0 else \
        engine.runner.stage.ask(owner, session_rows.SessionRows("blocks", (tensor_name, ids)))
    if len(device) == len(held.blocks):
        return rows
    out = torch.empty(len(held.blocks), *rows.shape[1:], dtype=rows.dtype)
    out[[i for i, _ in device]] = rows
    out[[i for i, (kind, _) in enumerate(held.blocks) if kind == "parked"]] = held.parked[tensor_name]
    return out


def write_session(path: str, token_ids: list[int], kv: dict[str, torch.Tensor], states: dict[str, torch.Tensor],
                  current: dict) -> int:
    """Thread: the file -> bytes written."""
    header = {"format": FORMAT, "fingerprint": current, "num_tokens": len(token_ids), "saved_at": time.time()}
    tensors = {"token_ids": torch.tensor(token_ids, dtype=torch.int64), **{f"kv.{k}": t for k, t in kv.items()},
               **{f"state.{k}": t for k, t in states.items()}}
    return session_file.write(path, header, tensors)


# ---- restore: read and check (thread); take blocks, fill them tensor by tensor, register (loop) ----

@dataclasses.dataclass
class SavedSession:
    """A session file read into host memory and checked against this engine."""

    token_ids: list[int]
    kv: dict[str, torch.Tensor]           # name -> [N_blocks, B, ...]
    states: dict[str, torch.Tensor]       # name -> [1, ...]
    num_bytes: int


def read_session(path: str, current: dict, vocab_size: int) -> SavedSession:
    """Thread: open a session file, check it against this engine, read its tensors."""
    filename = os.path.basename(path)
    if not os.path.isfile(path):
        raise SessionError(404, f"no session file {filename!r} in the sessions folder")
    try:
        reader = session_file.SessionReader(path)
    except session_file.SessionFileError as e:
        raise SessionError(400, str(e)) from e
    check_header(reader.header, current, filename)
    token_ids = reader.tensor("token_ids").tolist() if "token_ids" in reader.layout else []
    _check_layout(reader.layout, token_ids, current, vocab_size, filename)
    return SavedSession(token_ids, {n[3:]: reader.tensor(n) for n in reader.layout if n.startswith("kv.")},
                        {n[6:]: reader.tensor(n) for n in reader.layout if n.startswith("state.")},
                        os.path.getsize(path))


def _check_layout(layout: dict, token_ids: list[int], current: dict, vocab_size: int, filename: str) -> None:
    """The tensors must be what this engine's caches hold: a damaged or edited file never reaches them."""
    block_size = current["block_size"]
    num_blocks = len(token_ids) // block_size
    expected = {"token_ids": ["int64", [len(token_ids)]]}
    expected |= {f"kv.{name}": [dtype, [num_blocks, *shape]] for name, (shape, dtype) in current["kv_layout"].items()}
    expected |= {f"state.{name}": [dtype, [1, *shape]] for name, (shape, dtype) in current["state_layout"].items()}
    found = {name: [str(dtype).removeprefix("torch."), shape] for name, (dtype, shape) in layout.items()}
    if (not num_blocks or len(token_ids) % block_size or found != expected
            or any(not 0 <= t < vocab_size for t in token_ids)):
        raise SessionError(400, f"{filename} is damaged: its tensors do not match its header")


@dataclasses.dataclass
class Reservation:
    """Blocks of a restore in progress: those already cached held, fresh ones taken for the rest."""

    token_ids: list[int]
    hashes: list[int]
    blocks: list[int | None]      # per block of the prefix: the cached one held, or None (missing)
    missing: list[int]            # positions to fill
    fresh: list[int]              # their new blocks, unregistered until finish_restore


def reserve_blocks(engine, token_ids: list[int]) -> Reservation:
    """Loop, caches settled: hold the prefix's blocks that are cached and take fresh ones for the rest."""
    scheduler = engine.scheduler
    allocator, block_size = scheduler.allocator, scheduler.block_size
    _check_cache_on(scheduler)
    hashes = chain_hashes(token_ids, block_size, len(token_ids) // block_size)
    blocks = [allocator.cached_block(h, tuple(token_ids[i * block_size:(i + 1) * block_size]))
              for i, h in enumerate(hashes)]
    held = [b for b in blocks if b is not None]
    allocator.take(held)  # so that taking fresh blocks cannot evict them
    missing = [i for i, b in enumerate(blocks) if b is None]
    if len(missing) > allocator.num_blocks - len(held):  # never, however long it waits (a small device pool:
        allocator.free(held)                              # --kv-resident-tokens sizes it by the window)
        raise SessionError(507, f"the session needs {len(missing)} fresh KV blocks, more than the device pool of "
                                f"{allocator.num_blocks} can ever give; raise --num-gpu-blocks (or restore it on an "
                                f"engine without --kv-resident-tokens)")
    if not allocator.can_allocate(len(missing)):
        allocator.free(held)
        raise SessionError(503, f"the session needs {len(missing)} free KV blocks and {allocator.num_free} are free "
                                f"now (the pool holds {allocator.num_blocks}); retry when fewer requests run")
    reservation = Reservation(token_ids, hashes, blocks, missing, allocator.allocate(len(missing)))
    engine.run_pending()  # blocks just taken from the cache are parked before they are overwritten
    return reservation


def copy_in(engine, reservation: Reservation, tensor_name: str, saved: torch.Tensor) -> None:
    """Loop: one paged tensor's saved blocks [N_blocks, B, ...] into the reserved fresh blocks (on the pipeline
    stage that holds it)."""
    if reservation.fresh:
        rows, owner = saved[reservation.missing], _owner(engine, tensor_name)
        if owner == 0:
            session_rows.write_blocks(engine.runner, tensor_name, reservation.fresh, rows)
        else:
            engine.runner.stage.tell(owner, session_rows.SessionRows("write_blocks",
                                                                     (tensor_name, reservation.fresh, rows)))


def finish_restore(engine, reservation: Reservation, states: dict[str, torch.Tensor]) -> None:
    """Loop, caches settled: the recurrent state into a checkpoint row, the filled blocks registered,
    everything let go (unreferenced, most recently used: the next request that starts so takes it)."""
    scheduler, runner = engine.scheduler, engine.runner
    key, row = reservation.hashes[-1], None
    try:
        if states:
            row = _reserve_checkpoint(scheduler, key)
            engine.run_pending()  # a checkpoint evicted for this row is parked before it is overwritten
            for rank, own in _by_owner(engine, states).items() if row is not None else ():
                if rank == 0:
                    session_rows.write_states(runner, row, own)
                else:
                    runner.stage.tell(rank, session_rows.SessionRows("write_states", (row, own)))
        block_size = scheduler.block_size
        for i, block in zip(reservation.missing, reservation.fresh):
            tokens = tuple(reservation.token_ids[i * block_size:(i + 1) * block_size])
            scheduler.allocator.register(block, reservation.hashes[i], tokens)
    except BaseException:
        if row is not None:  # its state may be half written
            scheduler.checkpoints.release(key)
        raise
    finally:
        release_blocks(engine, reservation)


def _by_owner(engine, states: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """The saved recurrent state's tensors grouped by the pipeline stage that holds them."""
    grouped: dict[int, dict[str, torch.Tensor]] = {}
    for tensor_name, value in states.items():
        grouped.setdefault(_owner(engine, tensor_name, "state"), {})[tensor_name] = value
    return grouped


def release_blocks(engine, reservation: Reservation) -> None:
    blocks = list(reservation.blocks)
    for i, block in zip(reservation.missing, reservation.fresh):
        blocks[i] = block
    engine.scheduler.allocator.free(blocks[::-1])  # tail first, as a finished request frees: the start goes last


def _reserve_checkpoint(scheduler, key: int) -> int | None:
    """A checkpoint row for the prefix's end state; None when that state is already saved."""
    if scheduler.checkpoints.capacity == 0:
        raise SessionError(409, "this engine keeps no recurrent-state checkpoints (--checkpoint-pool-size 0), "
                                "so a hybrid model's session cannot be restored")
    return scheduler.checkpoints.try_reserve(key)


def _check_cache_on(scheduler) -> None:
    if not scheduler.prefix.enabled:
        raise SessionError(409, "prefix caching is off (--no-enable-prefix-caching): sessions live in the prefix cache")
