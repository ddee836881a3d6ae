"""Does the KV staging ring's copy hold back a step-like stream less when kernels make it, not the copy engines?

Main stream, as in session 21's copy_hol.py: per layer (9), 8 bf16 matmuls, a small device-to-host copy of the
layer's rows, a host wait for it, ~150 us of host work (the CPU experts), a small host-to-device upload (their
sum). Its transfers go by copy engine ("engine") or by kernels reading / writing pinned memory ("sm"). Side
stream: 112 MB of pinned host rows (one layer's host tier at 128K tokens, fp8; 8 KB rows) into the device, by one
cudaMemcpy ("engine") or by strata's gather kernel with P programs. Prints medians of 20 steps.
"""

import time

import torch
import triton
import triton.language as tl

from strata.kernels.host_gather import gather_rows

dev = "cuda"
WORDS = 2048  # an 8 KB row
ROWS = (112 << 20) // (WORDS * 4)
big_host = torch.randint(-2**31, 2**31 - 1, (ROWS, WORDS), dtype=torch.int32).pin_memory()
big_dev = torch.empty_like(big_host, device=dev)
index = torch.arange(ROWS, dtype=torch.int32).pin_memory()
rows_dev = torch.randn(4, 2048, device=dev)
rows_host = torch.empty(4, 2048).pin_memory()
sum_host = torch.randn(4, 2048).pin_memory()
sum_dev = torch.empty(4, 2048, device=dev)
a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
side = torch.cuda.Stream()


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + o, tl.load(src + o, mask=o < n), mask=o < n)


def transfer(dst, src, by_sm):
    if by_sm:
        _copy[(triton.cdiv(src.numel(), 1024),)](src, dst, src.numel(), BLOCK=1024)
    else:
        dst.copy_(src, non_blocking=True)


def side_copy(mode):
    if mode == "engine":
        big_dev.copy_(big_host, non_blocking=True)
    else:
        gather_rows(big_dev, big_host, index, ROWS, mode)


def step(side_mode, main_by_sm, layers=9):
    main = torch.cuda.current_stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if side_mode is not None:
        side.wait_stream(main)
        with torch.cuda.stream(side):
            side_copy(side_mode)
    for _ in range(layers):
        for _ in range(8):
            a @ a
        transfer(rows_host, rows_dev, main_by_sm)
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()
        t = time.perf_counter()
        while time.perf_counter() - t < 150e-6:
            pass
        transfer(sum_dev, sum_host, main_by_sm)
    for _ in range(8):
        a @ a
    end = torch.cuda.Event()
    end.record()
    end.synchronize()
    t_main = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t_main, time.perf_counter() - t0


def side_alone(mode):
    times = []
    for _ in range(10):
        torch.cuda.synchronize()
        t = time.perf_counter()
        side_copy(mode)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[5]


for mode in ("engine", 8, 16, 32, 64):
    side_copy(mode)
    torch.cuda.synchronize()
    assert torch.equal(big_dev.cpu(), big_host), mode
    big_dev.zero_()
    s = side_alone(mode)
    print(f"side copy alone, {mode!s:>6}: {s * 1e3:6.2f} ms ({big_host.numel() * 4 / s / 1e9:5.1f} GB/s)")
for _ in range(5):
    step(None, False), step(16, True)
for main_by_sm in (False, True):
    for mode in (None, "engine", 8, 16, 32, 64, None):
        times = [step(mode, main_by_sm) for _ in range(20)]
        main_ms = sorted(t[0] for t in times)[10] * 1e3
        all_ms = sorted(t[1] for t in times)[10] * 1e3
        print(f"main transfers by {'sm' if main_by_sm else 'engine':>6}, side {mode!s:>6}: main stream {main_ms:6.2f} ms, "
              f"with the side copy {all_ms:6.2f} ms (medians of 20)")
