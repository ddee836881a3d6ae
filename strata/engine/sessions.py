"""Sessions on disk: a conversation's cached prefix (its KV blocks in every paged layer, and on hybrid
models the recurrent-state checkpoint where the prefix ends) saved to a file, and put back into the
prefix cache so the request that continues the conversation after a restart reads only its new tokens.

The engine loop does only the copies between the caches and host memory (`collect`, `install`), with no
step in flight (EngineCore.settle); the file's I/O runs on a worker thread (`SessionJobs`). A file is
refused unless its fingerprint (model config, weights, dtype, block size, cache layout) equals this
engine's; what is saved is exactly what the prefix cache would give a request with those tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from strata.cache import session_file
from strata.cache.block_allocator import chain_hashes

logger = logging.getLogger(__name__)

FORMAT = "strata-session/1"
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
_SAMPLE_BYTES = 64 << 10


class SessionError(Exception):
    """A save or restore the engine refuses; `status` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Snapshot:
    """A cached prefix in host memory: its tokens (whole blocks), KV per paged layer [N_blocks, B, ...]
    and, on hybrid models, the recurrent state after its last token [1, ...] per state tensor."""

    token_ids: list[int]
    kv: dict[str, torch.Tensor]
    states: dict[str, torch.Tensor]


# ---- fingerprint -----------------------------------------------------------------------------------

def _name(key) -> str:
    """A pool key (layer index, ("ple", layer), a QSA key name) as a tensor-name part."""
    return "-".join(map(str, key)) if isinstance(key, tuple) else str(key)


def _layout(pools: dict) -> dict[str, list]:
    """name -> [per-row shape, dtype] of both tensors of every entry of a KV or state pool."""
    return {f"{_name(key)}.{i}": [list(t.shape[1:]), str(t.dtype).removeprefix("torch.")]
            for key, pair in pools.items() for i, t in enumerate(pair)}


def _weight_files(spec: str) -> list[str]:
    from strata.weights.source import BUNDLED_MODELS, bundled_model_path

    path = bundled_model_path(spec) if spec in BUNDLED_MODELS else spec
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(_WEIGHT_SUFFIXES))
    return [path]


def _file_identity(path: str) -> list:
    """[file name, size, sha256 of its first and last 64 KiB]: cheap, and tells apart files of one shape."""
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(_SAMPLE_BYTES))
        f.seek(max(size - _SAMPLE_BYTES, 0))
        digest.update(f.read(_SAMPLE_BYTES))
    return [os.path.basename(path), size, digest.hexdigest()[:16]]


def weights_identity(spec: str, seed: int, model: torch.nn.Module) -> dict:
    """Which weights: the files (random weights: the spec and seed) and a hash of every tensor's name,
    shape and dtype as loaded."""
    metadata = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        metadata.update(f"{name} {list(tensor.shape)} {tensor.dtype}\n".encode())
    files = {"spec": spec, "seed": seed} if spec.startswith("random:") else \
        {"files": [_file_identity(p) for p in _weight_files(spec)]}
    return {**files, "tensors": metadata.hexdigest()[:16]}


def fingerprint(engine) -> dict:
    """What a session file must match to be restored here."""
    from strata.weights.source import DEFAULT_MODEL

    runner = engine.runner
    model_config = dataclasses.asdict(engine.model_config)
    return {"architecture": engine.model_config.architecture,
            "model_config": {k: list(v) if isinstance(v, tuple) else v for k, v in model_config.items()},
            "weights": weights_identity(engine.config.model or DEFAULT_MODEL, engine.config.runner.seed,
                                        runner.model),
            "dtype": engine.dtype, "block_size": engine.scheduler.block_size,
            "kv_layout": _layout(runner.kv_pool.caches), "state_layout": _layout(runner.state_pool.caches)}


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


# ---- the loop's part: copies between the caches and host memory -----------------------------------

def collect(engine, token_ids: list[int]) -> Snapshot:
    """The cached prefix of `token_ids` (every whole block the prefix cache holds, cut back to the last
    checkpoint on hybrid models), copied to host memory. Call after engine.settle()."""
    scheduler, runner = engine.scheduler, engine.runner
    _check_cache_on(scheduler)
    match = scheduler.prefix.match_tokens(token_ids, len(token_ids) // scheduler.block_size)
    if match.num_blocks == 0:
        raise SessionError(404, "nothing of this conversation is in the prefix cache: send it (a chat or completion "
                                "request) first, then save it")
    park = runner.host_park
    kv = {}
    for key, pair in runner.kv_pool.caches.items():
        for i, pool in enumerate(pair):
            kv[f"{_name(key)}.{i}"] = _gather(pool, park.kv[key][i] if park is not None and park.kv else None,
                                              match.blocks)
    states = {}
    if runner.state_pool.caches:
        row, host_row = match.checkpoint_row, match.checkpoint_host_row
        source = runner.checkpoint_pool.caches if row is not None else park.states
        for key, pair in source.items():
            for i, rows in enumerate(pair):
                states[f"{_name(key)}.{i}"] = rows[row if row is not None else host_row].unsqueeze(0).cpu().clone()
    return Snapshot(token_ids[:match.num_blocks * scheduler.block_size], kv, states)


def _gather(pool: torch.Tensor, parked: torch.Tensor | None, blocks: list[tuple[str, int]]) -> torch.Tensor:
    """The blocks of a match from the device pool or its host park, in order -> [N_blocks, B, ...] on the host."""
    out = torch.empty(len(blocks), *pool.shape[1:], dtype=pool.dtype)
    for kind, source in (("device", pool), ("parked", parked)):
        positions = [i for i, (k, _) in enumerate(blocks) if k == kind]
        if positions:
            ids = torch.tensor([blocks[i][1] for i in positions], device=source.device)
            out[positions] = source.index_select(0, ids).cpu()
    return out


def install(engine, snapshot: Snapshot) -> int:
    """Put a saved prefix into the prefix cache (blocks already cached stay as they are), unreferenced
    and most recently used, so the next request that starts with it takes it -> tokens installed."""
    scheduler, runner = engine.scheduler, engine.runner
    allocator, block_size = scheduler.allocator, scheduler.block_size
    _check_cache_on(scheduler)
    tokens = snapshot.token_ids
    hashes = chain_hashes(tokens, block_size, len(tokens) // block_size)
    blocks: list[int | None] = [allocator.cached_block(h, tuple(tokens[i * block_size:(i + 1) * block_size]))
                                for i, h in enumerate(hashes)]
    held = [b for b in blocks if b is not None]
    allocator.take(held)  # so that allocating the missing ones cannot evict them
    missing = [i for i, b in enumerate(blocks) if b is None]
    if not allocator.can_allocate(len(missing)):
        allocator.free(held)
        raise SessionError(503, f"the session needs {len(missing)} free KV blocks and {allocator.num_free} are free "
                                f"now (the pool holds {allocator.num_blocks}); retry when fewer requests run")
    fresh, row = allocator.allocate(len(missing)), None
    try:
        row = _reserve_checkpoint(scheduler, hashes[-1]) if snapshot.states else None
        engine.run_pending()  # blocks and rows just taken from the cache are parked before they are overwritten
        if fresh:
            ids = torch.tensor(fresh, device=runner.device)
            for key, pair in runner.kv_pool.caches.items():
                for i, pool in enumerate(pair):
                    pool.index_copy_(0, ids, snapshot.kv[f"{_name(key)}.{i}"][missing].to(pool.device))
        if row is not None:
            for key, pair in runner.checkpoint_pool.caches.items():
                for i, rows in enumerate(pair):
                    rows[row].copy_(snapshot.states[f"{_name(key)}.{i}"][0])
        for i, block in zip(missing, fresh):
            allocator.register(block, hashes[i], tuple(tokens[i * block_size:(i + 1) * block_size]))
    except BaseException:
        if row is not None:  # its state may be half written
            scheduler.checkpoints.release(hashes[-1])
        raise
    finally:
        for i, block in zip(missing, fresh):
            blocks[i] = block
        allocator.free(blocks[::-1])  # tail first, as a finished request frees: the start is evicted last
    return len(tokens)


def _reserve_checkpoint(scheduler, key: int) -> int | None:
    """A checkpoint row for the prefix's end state; None when that state is already saved."""
    if scheduler.checkpoints.capacity == 0:
        raise SessionError(409, "this engine keeps no recurrent-state checkpoints (--checkpoint-pool-size 0), "
                                "so a hybrid model's session cannot be restored")
    return scheduler.checkpoints.try_reserve(key)


def _check_cache_on(scheduler) -> None:
    if not scheduler.prefix.enabled:
        raise SessionError(409, "prefix caching is off (--no-enable-prefix-caching): sessions live in the prefix cache")


# ---- files -----------------------------------------------------------------------------------------

def write_snapshot(path: str, snapshot: Snapshot, current: dict) -> int:
    header = {"format": FORMAT, "fingerprint": current, "num_tokens": len(snapshot.token_ids), "saved_at": time.time()}
    tensors = {"token_ids": torch.tensor(snapshot.token_ids, dtype=torch.int64),
               **{f"kv.{k}": t for k, t in snapshot.kv.items()}, **{f"state.{k}": t for k, t in snapshot.states.items()}}
    return session_file.write(path, header, tensors)


def read_snapshot(path: str, current: dict, vocab_size: int) -> tuple[Snapshot, int]:
    """Read and check a session file against this engine's fingerprint -> (snapshot, bytes read)."""
    filename = os.path.basename(path)
    if not os.path.isfile(path):
        raise SessionError(404, f"no session file {filename!r} in the sessions folder")
    try:
        check_header(session_file.read_header(path), current, filename)
        tensors = session_file.read_tensors(path)
    except session_file.SessionFileError as e:
        raise SessionError(400, str(e)) from e
    token_ids = tensors.pop("token_ids", torch.empty(0, dtype=torch.int64)).tolist()
    snapshot = Snapshot(token_ids, {k[3:]: t for k, t in tensors.items() if k.startswith("kv.")},
                        {k[6:]: t for k, t in tensors.items() if k.startswith("state.")})
    _check_contents(snapshot, current, vocab_size, filename)
    return snapshot, os.path.getsize(path)


def _check_contents(snapshot: Snapshot, current: dict, vocab_size: int, filename: str) -> None:
    """The tensors must be what the header promises: a damaged or edited file never reaches the caches."""
    block_size = current["block_size"]
    num_blocks = len(snapshot.token_ids) // block_size
    expected = {("kv", name): ([num_blocks, *shape], dtype) for name, (shape, dtype) in current["kv_layout"].items()}
    if snapshot.states:
        expected |= {("state", name): ([1, *shape], dtype) for name, (shape, dtype) in current["state_layout"].items()}
    found = {("kv", k): t for k, t in snapshot.kv.items()} | {("state", k): t for k, t in snapshot.states.items()}
    bad = (not num_blocks or len(snapshot.token_ids) % block_size
           or any(not 0 <= t < vocab_size for t in snapshot.token_ids)
           or bool(current["state_layout"]) != bool(snapshot.states) or found.keys() != expected.keys()
           or any([list(found[k].shape), str(found[k].dtype).removeprefix("torch.")] != list(v)
                  for k, v in expected.items()))
    if bad:
        raise SessionError(400, f"{filename} is damaged: its tensors do not match its header")


# ---- jobs --------------------------------------------------------------------------------------------

class SessionJobs:
    """Save and restore requests in the engine process: reading and writing files on one worker thread,
    the copies to and from the caches on the loop (`run`, between steps). Replies are plain dicts:
    {"ok": True, ...numbers} or {"ok": False, "status": HTTP status, "error": message}."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self._io = ThreadPoolExecutor(1, thread_name_prefix="strata-session")
        self._reading: dict[Future, tuple[int, float]] = {}   # restore: file being read -> (call id, started)
        self._writing: dict[Future, tuple[int, dict]] = {}    # save: file being written -> (call id, reply so far)
        self._due: deque[tuple[int, str, dict, float, object]] = deque()  # loop parts waiting for a step's end
        self._fingerprint: dict | None = None

    @property
    def busy(self) -> bool:
        return bool(self._reading or self._writing or self._due)

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.engine)
        return self._fingerprint

    def submit(self, call_id: int, action: str, args: dict) -> list[tuple[int, dict]]:
        """Start one job -> replies ready at once (an unknown action)."""
        started = time.perf_counter()
        if action == "save":
            self._due.append((call_id, "save", args, started, None))
        elif action == "restore":
            future = self._io.submit(read_snapshot, args["path"], self.fingerprint(),
                                     self.engine.model_config.vocab_size)
            self._reading[future] = (call_id, started)
        else:
            return [(call_id, _error(400, f"unknown session action {action!r}"))]
        return []

    def run(self) -> tuple[list, list[tuple[int, dict]]]:
        """Advance every job -> (token deltas of a step finished to settle the caches, replies)."""
        replies, deltas = [], []
        for future in [f for f in self._writing if f.done()]:
            call_id, reply = self._writing.pop(future)
            replies.append((call_id, _outcome(future, lambda n: {**reply, "bytes": n})))
        for future in [f for f in self._reading if f.done()]:
            call_id, started = self._reading.pop(future)
            if future.exception() is None:
                self._due.append((call_id, "restore", {}, started, future.result()))
            else:
                replies.append((call_id, _outcome(future, None)))
        if self._due:
            deltas = self.engine.settle()
        while self._due:
            replies += self._run_loop_part(*self._due.popleft())
        return deltas, replies

    def _run_loop_part(self, call_id: int, action: str, args: dict, started: float, read) -> list:
        held = time.perf_counter()
        try:
            if action == "save":
                snapshot = collect(self.engine, args["token_ids"])
            else:
                snapshot, num_bytes = read
                install(self.engine, snapshot)
        except SessionError as e:
            return [(call_id, _error(e.status, str(e)))]
        except Exception as e:  # a failed copy must not take the engine down
            logger.exception("session %s failed", action)
            return [(call_id, _error(500, f"{type(e).__name__}: {e}"))]
        reply = {"ok": True, "num_tokens": len(snapshot.token_ids), "loop_seconds": time.perf_counter() - held}
        if action == "restore":
            return [(call_id, {**reply, "bytes": num_bytes, "seconds": time.perf_counter() - started})]
        self._writing[self._io.submit(_timed_write, args["path"], snapshot, self.fingerprint(), started)] = \
            (call_id, reply)
        return []


def _timed_write(path: str, snapshot: Snapshot, current: dict, started: float) -> tuple[int, float]:
    return write_snapshot(path, snapshot, current), time.perf_counter() - started


def _outcome(future: Future, make_reply) -> dict:
    error = future.exception()
    if isinstance(error, SessionError):
        return _error(error.status, str(error))
    if error is not None:
        return _error(500, f"{type(error).__name__}: {error}")
    num_bytes, seconds = future.result()
    return {**make_reply(num_bytes), "seconds": seconds}


def _error(status: int, message: str) -> dict:
    return {"ok": False, "status": status, "error": message}
