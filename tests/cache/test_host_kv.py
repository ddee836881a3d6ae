"""The host KV tier's copies (KV beyond VRAM, strata/cache/host_kv.py): device blocks into host blocks in any
order, one copy per run of consecutive host blocks, for every key of the pool (int8 scales, QSA's index keys
with their empty second tensor); parked rows straight into the tier. CPU here; on CUDA the same copies are
queued on the stream (`settle` waits for them)."""

from __future__ import annotations

import torch

from strata.cache.host_kv import HostKVPool
from strata.transfer import consecutive_runs
from strata.cache.pools import KVPool


def test_consecutive_runs_split_the_host_blocks_into_copies():
    assert consecutive_runs([]) == []
    assert consecutive_runs([7]) == [(0, 7, 1)]
    assert consecutive_runs([3, 4, 5, 9, 10, 2]) == [(0, 3, 3), (3, 9, 2), (5, 2, 1)]
    assert consecutive_runs([5, 4]) == [(0, 5, 1), (1, 4, 1)]  # descending ids are separate runs


def _pool(kv_dtype=None) -> KVPool:
    pool = KVPool([0, 3], num_blocks=8, block_size=2, num_kv_heads=2, head_dim=4, dtype=torch.float32, device="cpu",
                  extra_keys={"index": 3}, kv_dtype=kv_dtype)
    generator = torch.Generator().manual_seed(0)
    for pair in pool.caches.values():
        for t in pair:
            t.copy_(torch.randint(-100, 100, t.shape, generator=generator).to(t.dtype))
    return pool


def test_offload_copies_every_key_of_each_device_block_into_its_host_block():
    pool = _pool(torch.int8)  # int8 K and V with float32 scales beside them
    host = HostKVPool(pool, num_blocks=6)
    pairs = [(5, 2), (1, 3), (6, 0), (0, 4)]  # host blocks 2 and 3 in one copy, then 0, then 4
    host.offload(pairs)
    host.settle()  # nothing in flight on the CPU
    assert host.offloads.copied is None
    assert set(host.caches) == set(pool.caches) and len(pool.caches) == 5  # 2 layers, 2 scale pairs, the index keys
    for key, (k, v) in pool.caches.items():
        host_k, host_v = host.caches[key]
        for device_block, host_block in pairs:
            assert torch.equal(host_k[host_block], k[device_block])
            if v.numel():
                assert torch.equal(host_v[host_block], v[device_block])
        assert not host_k[[1, 5]].any()  # untouched host blocks
    host.offload([])  # nothing to copy: no event, nothing written


def test_unpark_copies_parked_rows_into_host_blocks():
    pool = _pool()
    host = HostKVPool(pool, num_blocks=4)
    park = {key: (k[:3].clone(), v[:3].clone()) for key, (k, v) in pool.caches.items()}  # three parked rows
    host.unpark(park, [(2, 1), (0, 3)])
    for key, (k, v) in park.items():
        assert torch.equal(host.caches[key][0][1], k[2]) and torch.equal(host.caches[key][0][3], k[0])
        if v.numel():
            assert torch.equal(host.caches[key][1][1], v[2])
