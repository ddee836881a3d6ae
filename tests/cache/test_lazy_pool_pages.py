"""A KV pool on the CPU is sized for every slot at full length, but costs resident memory only as requests
write into it: its zeros are untouched pages until then (pools.zeros)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from strata.cache.pools import KVPool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_GROWTH = """
import torch
from strata.cache.pools import KVPool

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

before = rss_mib()
pool = KVPool([0, 1], num_blocks=2048, block_size=16, num_kv_heads=4, head_dim=128, dtype=torch.float32, device="cpu")
print(rss_mib() - before)
"""


def test_a_cpu_kv_pool_is_resident_only_where_written():
    # the resident memory in a process of its own, as an engine builds its pool at start: in a long test process
    # the allocator may hand out memory earlier tests used, which it must clear (its pages then count)
    growth = float(subprocess.run([sys.executable, "-c", _GROWTH], capture_output=True, text=True, check=True,
                                  env={**os.environ, "PYTHONPATH": ROOT}).stdout)
    assert growth < 32                                                            # 256 MiB allocated
    pool = KVPool([0, 1], num_blocks=2048, block_size=16, num_kv_heads=4, head_dim=128, dtype=torch.float32,
                  device="cpu")                                                  # 2 layers x (K, V) x 64 MiB
    k, v = pool.caches[0]
    assert k.shape == (2048, 16, 4, 128) and k.dtype == torch.float32 and k.is_contiguous()
    assert not k[::97].any() and not v[-1].any()                                 # zeros where read
    k[5].fill_(1.5)
    assert k[5].sum().item() == 1.5 * 16 * 4 * 128 and not k[4].any() and not k[6].any()
    fp8 = KVPool([0], num_blocks=4, block_size=16, num_kv_heads=2, head_dim=8, dtype=torch.float32, device="cpu",
                 kv_dtype=torch.float8_e4m3fn)
    assert fp8.caches[0][0].dtype == torch.float8_e4m3fn and not fp8.caches[0][0].view(torch.uint8).any()
