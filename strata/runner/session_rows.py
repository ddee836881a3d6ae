"""A session file's rows in one process's caches (strata/engine/sessions.py reads and writes them): the names of
the paged and recurrent tensors, and their rows' reads and writes. Under a pipeline split each stage holds its own
layers' tensors: stage 0 asks the stage that owns a tensor for its rows with a SessionRows message in the plan
stream (runner/pipeline.py: `Stage.ask` / `tell`), which that stage's `ModelRunner.follow` answers with `serve`
in stream order with the steps around it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.transfer import index_tensor, raw


@dataclass
class SessionRows:
    """A request to the stage that owns some of a session's tensors: `op` names the function of this module it
    runs there (held, blocks, write_blocks, write_states), `args` its arguments after the runner."""

    op: str
    args: tuple


def name(key) -> str:
    """A pool key (layer index, ("ple", layer), a QSA key name) as a tensor-name part."""
    return "-".join(map(str, key)) if isinstance(key, tuple) else str(key)


def _named(pools: dict) -> dict[str, torch.Tensor]:
    return {f"{name(key)}.{i}": t for key, pair in pools.items() for i, t in enumerate(pair)}


def kv_pools(runner) -> dict[str, torch.Tensor]:
    """Tensor name -> pool [N_blocks, B, ...] of every paged cache here: K and V per layer (MTP and QSA keys too)."""
    return _named(runner.kv_pool.caches)


def layout(runner) -> dict[str, dict[str, list]]:
    """{"kv": ..., "state": ...}: name -> [per-row shape, dtype] of both tensors of every KV and state pool entry."""
    def of(pools: dict) -> dict[str, list]:
        return {n: [list(t.shape[1:]), str(t.dtype).removeprefix("torch.")] for n, t in _named(pools).items()}

    return {"kv": of(runner.kv_pool.caches), "state": of(runner.state_pool.caches)}


def held(runner, parked_rows: list[int], checkpoint: tuple[str, int] | None) -> tuple[dict, dict]:
    """What a held prefix must copy at once (the loop may reuse these rows after it moves on) -> (name ->
    [N_parked, B, ...] the parked blocks' host copies, in order; name -> [1, ...] the recurrent state of
    `checkpoint`: ("device", checkpoint row) or ("host", parked checkpoint row))."""
    park = runner.host_park
    if park is not None:
        park.settle()  # parks queued on the stream have landed before the host reads their rows
    parked = {}
    if parked_rows:
        rows = torch.tensor(parked_rows)
        parked = {n: t.index_select(0, rows) for n, t in _named(park.kv).items()}
    states = {}
    if runner.state_pool.caches and checkpoint is not None:
        where, row = checkpoint
        source = runner.checkpoint_pool.caches if where == "device" else park.states
        states = {n: t[row].unsqueeze(0).cpu().clone() for n, t in _named(source).items()}
    return parked, states


@torch.inference_mode()
def blocks(runner, tensor_name: str, block_ids: list[int]) -> torch.Tensor:
    """One paged tensor's device blocks, in order -> [N, B, ...] in host memory."""
    pool = kv_pools(runner)[tensor_name]
    return pool.index_select(0, torch.tensor(block_ids, device=pool.device)).cpu()


@torch.inference_mode()
def write_blocks(runner, tensor_name: str, block_ids: list[int], rows: torch.Tensor) -> None:
    """rows [N, B, ...] (host) into one paged tensor's blocks `block_ids`."""
    if block_ids:
        pool = kv_pools(runner)[tensor_name]
        raw(pool).index_copy_(0, index_tensor(block_ids, pool.device), raw(rows).to(pool.device))  # fp8 KV: bytes


@torch.inference_mode()
def write_states(runner, row: int, states: dict[str, torch.Tensor]) -> None:
    """The recurrent state (name -> [1, ...], this process's tensors) into checkpoint row `row`."""
    for n, rows in _named(runner.checkpoint_pool.caches).items():
        rows[row].copy_(states[n][0])


def serve(runner, request: SessionRows):
    """Another stage's side of a SessionRows request -> its reply (None for the writes)."""
    ops = {"held": held, "blocks": blocks, "write_blocks": write_blocks, "write_states": write_states}
    return ops[request.op](runner, *request.args)
