"""Routing profiles: per MoE layer, how often each expert was routed to, saved as JSON.

A profile fills the hot set at start; it is checked against the model it is loaded for (layer and
expert counts) so a profile of another model fails with a clear error instead of a silent bad split.
"""

from __future__ import annotations

import json
import os

import torch

FORMAT = "strata-expert-profile"
VERSION = 1


def save_profile(path: str, counts: torch.Tensor, architecture: str, steps: int) -> None:
    """counts [L, E] routed (token, k) pairs per layer and expert."""
    data = {"format": FORMAT, "version": VERSION, "architecture": architecture, "steps": steps,
            "num_layers": counts.shape[0], "num_experts": counts.shape[1], "counts": counts.tolist()}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)  # a crash mid-write leaves the old profile, never half a file


def load_profile(path: str, num_layers: int, num_experts: int) -> torch.Tensor:
    """-> counts [L, E] (long); raises ValueError when the file is not a profile of this model's shape."""
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
