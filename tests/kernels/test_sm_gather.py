"""kernels/sm_copy.gather_rows: a row gather by the SMs (experts' bytes from host memory into staging slots),
checked against indexing in torch: the kernel in Triton's interpreter on the CPU or on a GPU from pinned memory, and
the CPU's torch path; into rows further apart than their size, as device slots are."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.sm_copy import GATHER_BLOCK_WORDS, gather_rows


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("strided", [False, True])
def test_gather_rows_copies_the_named_rows_and_leaves_the_others(device, strided):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    src = torch.randint(0, 256, (7, 3, GATHER_BLOCK_WORDS * 4 + 36), dtype=torch.uint8)  # rows of 2.x blocks
    if device == "cuda":
        src = src.pin_memory()
    row = src[0].numel()
    slots = torch.full((4, row + (64 if strided else 0)), 9, dtype=torch.uint8, device=device)  # [S, slot bytes]
    dst = slots[:, :row].unflatten(1, src.shape[1:])
    ids = torch.tensor([5, -1, 0, 5], device=device)
    gather_rows(dst, src, ids)
    expected = src[[5, 0, 0, 5]].clone()
    expected[1] = 9
    assert torch.equal(dst.cpu(), expected)
    assert (slots[:, row:] == 9).all()  # the bytes between the rows are not written


def test_misshapen_arguments_are_refused():
    src = torch.zeros(4, 10, dtype=torch.uint8)
    with pytest.raises(ValueError, match="whole 32-bit words"):
        gather_rows(torch.zeros(2, 10, dtype=torch.uint8), src, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="alike contiguous rows"):
        gather_rows(torch.zeros(2, 12, dtype=torch.uint8), torch.zeros(4, 8, dtype=torch.uint8),
                    torch.zeros(2, dtype=torch.long))
