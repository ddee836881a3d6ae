"""Host copies of weights (transfer.host_copy, huge-page-backed memory): same values, independent of the source,
any dtype and shape, empty tensors included; pinned on CUDA (see test_expert_offload_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from strata.transfer import host_copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_host_copy_holds_the_values_in_memory_of_its_own(dtype):
    source = torch.randn(3, 8, 5).to(dtype)
    copy = host_copy(source, pin=False)
    assert copy.shape == source.shape and copy.dtype == dtype and copy.is_contiguous()
    assert torch.equal(copy, source)
    source.zero_()
    assert not torch.equal(copy, source)
    copy[0].fill_(1)  # writable
    assert copy[0].eq(1).all()


def test_host_copy_of_an_empty_tensor():
    assert host_copy(torch.empty(0, 4), pin=False).shape == (0, 4)


def test_a_files_map_is_never_page_locked_in_place(tmp_path, caplog):
    """pin_in_place refuses memory in a file's map (registering a GGUF's 3.5 GB map ran in the kernel for 12+
    minutes on an H100 host) with a warning naming the file, before it asks CUDA anything; a host copy of the same
    bytes is anonymous memory, which it takes."""
    import numpy as np

    from strata.transfer import mapped_file, pin_in_place

    path = tmp_path / "blocks.bin"
    path.write_bytes(bytes(range(256)) * 64)
    mapped = torch.from_numpy(np.memmap(path, dtype=np.uint8, mode="r+"))
    assert mapped_file(mapped[4000:].data_ptr()) == str(path)
    with caplog.at_level("WARNING"):
        assert not pin_in_place(mapped, "a test's table")
    assert str(path) in caplog.text and "a test's table" in caplog.text
    copy = host_copy(mapped, pin=False)
    assert torch.equal(copy, mapped) and mapped_file(copy.data_ptr()) is None
    assert mapped_file(torch.zeros(1 << 20).data_ptr()) is None
