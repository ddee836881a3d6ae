"""Host-to-device copies of small index arrays that do not make the host wait for the device, and byte
views for copying float8 tensors."""

from __future__ import annotations

import torch


FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def raw(t: torch.Tensor) -> torch.Tensor:
    """t, or for float8 its bytes (a uint8 view): torch lacks index_copy_ for float8; copies of bytes are exact."""
    return t.view(torch.uint8) if t.dtype in FLOAT8 else t


def index_tensor(values, device: torch.device | str, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A host list (or CPU tensor) of indices on `device`. To CUDA it goes through pinned memory without
    blocking: a plain copy from pageable memory makes the host wait for the device to drain its queue,
    which inside a layer serialises the host's launches with the device's work."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda" or torch.cuda.is_current_stream_capturing():
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def consecutive_runs(ids: list[int]) -> list[tuple[int, int, int]]:
    """ids -> (index of the run's first id in ids, its first id, its length) for each run of consecutive ids."""
    runs = []
    for i, block in enumerate(ids):
        if runs and runs[-1][1] + runs[-1][2] == block:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, block, 1))
    return runs
