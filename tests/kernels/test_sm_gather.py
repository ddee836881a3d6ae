"""kernels/sm_copy.gather_rows: a row gather by the SMs (experts' bytes from host memory into staging slots),
checked against indexing in torch, in Triton's interpreter on the CPU or on a GPU from pinned memory."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from strata.kernels.sm_copy import GATHER_BLOCK_WORDS, gather_rows  # noqa: E402


def devices() -> list[str]:
    import os

    found = ["cuda"] if torch.cuda.is_available() else []
    return found + (["cpu"] if os.environ.get("TRITON_INTERPRET") == "1" else [])


@pytest.mark.parametrize("device", devices() or [pytest.param("none", marks=pytest.mark.skip("no CUDA device and "
                                                                                            "no TRITON_INTERPRET=1"))])
def test_gather_rows_copies_the_named_rows_and_leaves_the_others(device):
    src = torch.randint(0, 256, (7, 3, GATHER_BLOCK_WORDS * 4 + 36), dtype=torch.uint8)  # rows of 2.x blocks
    if device == "cuda":
        src = src.pin_memory()
    dst = torch.full((4, *src.shape[1:]), 9, dtype=torch.uint8, device=device)
    ids = torch.tensor([5, -1, 0, 5], device=device)
    gather_rows(dst, src, ids)
    expected = src[[5, 0, 0, 5]].clone()
    expected[1] = 9
    assert torch.equal(dst.cpu(), expected)


def test_misshapen_arguments_are_refused():
    src = torch.zeros(4, 10, dtype=torch.uint8)
    with pytest.raises(ValueError, match="whole 32-bit words"):
        gather_rows(torch.zeros(2, 10, dtype=torch.uint8), src, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="alike rows"):
        gather_rows(torch.zeros(2, 12, dtype=torch.uint8), torch.zeros(4, 8, dtype=torch.uint8),
                    torch.zeros(2, dtype=torch.long))
