"""kernels/sm_copy.gather_rows: a row gather by the SMs (experts' bytes from host memory into staging slots),
checked against indexing in torch: the kernel in Triton's interpreter on the CPU or on a GPU from pinned memory, and
the CPU's torch path; into rows further apart than their size, as device slots are."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.sm_copy import GATHER_BLOCK_WORDS, gather_rows
from strata.transfer import pin_in_place


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu),
                                    pytest.param("cuda-pinned-in-place", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("strided", [False, True])
def test_gather_rows_copies_the_named_rows_and_leaves_the_others(device, strided):
    """From torch's pinned memory, or from memory page-locked where it lies (transfer.pin_in_place, as a PLE table
    in host memory is)."""
    if device != "cpu" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    src = torch.randint(0, 256, (7, 3, GATHER_BLOCK_WORDS * 4 + 36), dtype=torch.uint8)  # rows of 2.x blocks
    if device == "cuda":
        src = src.pin_memory()
    elif device == "cuda-pinned-in-place":
        assert pin_in_place(src, "a test's rows")
        device = "cuda"
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


def _export_problem(device: str, num_rows: int = 3, top_k: int = 6, dim: int = 2 * 2048 + 40):
    """A layer's routing and rows as the device has them (ids int64, weights and rows bfloat16, rows strided) and the
    exchange's host buffers (ids, weights float32, slots int64, rows bfloat16)."""
    generator = torch.Generator().manual_seed(num_rows * 100 + top_k)
    ids = torch.randint(0, 128, (num_rows, top_k), generator=generator).to(device)
    weights = torch.rand(num_rows, top_k, generator=generator).to(torch.bfloat16).to(device)
    slots = torch.randint(-2, 30, (num_rows, top_k), generator=generator).to(device)
    wide = torch.randn(num_rows, dim + 8, generator=generator).to(torch.bfloat16).to(device)
    src = (ids, weights, slots, wide[:, 4:dim + 4])  # rows of a wider tensor: stride(0) > dim
    pinned = {"pin_memory": device == "cuda"}
    dst = (torch.zeros(num_rows, top_k, dtype=torch.long, **pinned), torch.zeros(num_rows, top_k, **pinned),
           torch.zeros(num_rows, top_k, dtype=torch.long, **pinned),
           torch.zeros(num_rows, dim, dtype=torch.bfloat16, **pinned))
    return dst, src


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_export_rows_casts_each_buffer_as_its_copy_would(device):
    """sm_copy.export_rows: one launch (Triton's interpreter with TRITON_INTERPRET=1, else torch copies on the CPU)
    gives each host buffer what dst.copy_(src) gives it: ids and slots as they are, weights widened to float32,
    rows (wider than a program's 2,048 columns, strided) bit for bit."""
    from strata.kernels.sm_copy import export_rows

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    dst, src = _export_problem(device)
    export_rows(dst, src)
    for d, s in zip(dst, src):
        assert torch.equal(d, s.cpu().to(d.dtype))


@pytest.mark.gpu
def test_export_rows_inside_a_graph_writes_each_replays_values():
    from strata.kernels.sm_copy import export_rows

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    dst, src = _export_problem("cuda", num_rows=2, top_k=8, dim=2048)
    export_rows(dst, src)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        export_rows(dst, src)
    for s in src:
        s.copy_(torch.randint(-5, 100, s.shape).to(s.dtype))
    graph.replay()
    torch.cuda.synchronize()
    for d, s in zip(dst, src):
        assert torch.equal(d, s.cpu().to(d.dtype))


def test_export_rows_refuses_buffers_that_do_not_match():
    from strata.kernels.sm_copy import export_rows

    dst, src = _export_problem("cpu")
    with pytest.raises(ValueError, match="alike in dst and src"):
        export_rows(dst, (src[0][:2],) + src[1:])
    with pytest.raises(ValueError, match="alike in dst and src"):
        export_rows(dst[:3], src[:3])
    with pytest.raises(ValueError, match="unit stride"):
        export_rows(dst, src[:3] + (src[3].t().contiguous().t(),))
