"""Routing profiles: per MoE layer, how often each expert was routed to, saved as JSON.

A profile fills the hot set at start; it is checked against the model it is loaded for (layer and
expert counts) so a profile of another model fails with a clear error instead of a silent bad split. It covers
every MoE layer of the model, also under a pipeline split, where each stage reads and writes the rows of its own.
"""

from __future__ import annotations

import fcntl
import json
import os

import torch

FORMAT = "strata-expert-profile"
VERSION = 1


def save_profile(path: str, counts: torch.Tensor, architecture: str, steps: int, layers: list[int] | None = None,
                 num_layers: int | None = None) -> None:
    """counts [L, E] routed (token, k) pairs per layer and expert. `layers`: a pipeline stage's rows of a model of
    `num_layers` MoE layers: they replace those rows of the file, under a lock (`path`.lock), as every stage
    writes its own; rows no stage wrote yet are zeros."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if layers is None:
        _write(path, counts, architecture, steps)
        return
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        whole = torch.zeros(num_layers, counts.shape[1], dtype=torch.long)
        if os.path.exists(path):
            try:
                whole = load_profile(path, num_layers, counts.shape[1])
            except ValueError:  # another model's profile: this model's rows start from zeros
                pass
        whole[layers] = counts
        _write(path, whole, architecture, steps)


def _write(path: str, counts: torch.Tensor, architecture: str, steps: int) -> None:
    data = {"format": FORMAT, "version": VERSION, "architecture": architecture, "steps": steps,
            "num_layers": counts.shape[0], "num_experts": counts.shape[1], "counts": counts.tolist()}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)  # a crash mid-write leaves the old profile, never half a file


def load_profile(path: str, num_layers: int, num_experts: int) -> torch.Tensor:
    """-> counts [L, E] (long) of every MoE layer of the model; raises ValueError when the file is not a profile of
    this model's shape."""
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"expert profile {path} is not valid JSON ({e}); record one with `strata profile`") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a strata expert profile (no \"format\": \"{FORMAT}\"); "
                         f"record one with `strata profile MODEL --output {path}`")
    counts = torch.tensor(data.get("counts", []), dtype=torch.long)
    if tuple(counts.shape) != (num_layers, num_experts):
        raise ValueError(f"expert profile {path} has counts of shape {tuple(counts.shape)}, but this model has "
                         f"{num_layers} MoE layers of {num_experts} experts; record a profile for this model")
    if (counts < 0).any():
        raise ValueError(f"expert profile {path} has negative counts")
    return counts
