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
