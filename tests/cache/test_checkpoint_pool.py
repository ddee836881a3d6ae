"""cache/pools.CheckpointPool: a hybrid model's recurrent states saved from slots into checkpoint rows and restored
into other slots, every layer's tensors alike (on CUDA in one launch), on the CPU and on a GPU."""

from __future__ import annotations

import pytest
import torch

from strata.cache.pools import CheckpointPool, StatePool


def _check_save_and_restore(device: str) -> None:
    shapes = {0: ((8, 3), (2, 4, 4)), 3: ((8, 3), (2, 4, 4)), 5: ((6, 3), (1, 4, 4))}  # conv, delta-rule state
    states = StatePool(shapes, 4, torch.bfloat16, device)
    generator = torch.Generator().manual_seed(0)
    for conv, ssm in states.caches.values():
        conv.copy_(torch.randn(conv.shape, generator=generator))
        ssm.copy_(torch.randn(ssm.shape, generator=generator))
    before = {layer: (conv.clone(), ssm.clone()) for layer, (conv, ssm) in states.caches.items()}
    checkpoints = CheckpointPool(states, 5)
    checkpoints.save([2, 0], [4, 1])                  # slot 2 -> row 4, slot 0 -> row 1
    for layer, tensors in checkpoints.caches.items():
        for saved, original in zip(tensors, before[layer]):
            assert torch.equal(saved[4], original[2]) and torch.equal(saved[1], original[0])
            assert not saved[[0, 2, 3]].any()         # rows not saved stay as they were
    for conv, ssm in states.caches.values():
        conv.zero_()
        ssm.zero_()
    checkpoints.restore([4, 1], [3, 1])               # row 4 -> slot 3, row 1 -> slot 1
    for layer, tensors in states.caches.items():
        for restored, original in zip(tensors, before[layer]):
            assert torch.equal(restored[3], original[2]) and torch.equal(restored[1], original[0])
            assert not restored[[0, 2]].any()


def test_save_and_restore_on_the_cpu():
    _check_save_and_restore("cpu")


@pytest.mark.gpu
def test_save_and_restore_on_cuda():
    _check_save_and_restore("cuda")
