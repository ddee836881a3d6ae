"""Does a large host-to-device copy on a side stream hold back the small copies of the main stream?

Emulates a step of offloaded MoE layers while the KV staging ring fills: on the main stream, per layer, a
matmul, a small device-to-host copy (the layer's rows), a host wait for it, ~150 us of host work (the CPU
experts) and a small host-to-device upload (their sum). On a side stream, one ~112 MB pinned copy (a layer's
host tier at 128K tokens, fp8) split into chunks of the given size. Prints the main stream's wall time per
step with no side copy and with each chunk size, and the side copy's own time.
"""

import time

import torch

dev = "cuda"
big_host = torch.empty(112 << 20, dtype=torch.uint8).pin_memory()
big_dev = torch.empty(big_host.shape, dtype=torch.uint8, device=dev)
rows_dev = torch.randn(4, 2048, device=dev)
rows_host = torch.empty(4, 2048).pin_memory()
sum_host = torch.randn(4, 2048).pin_memory()
sum_dev = torch.empty(4, 2048, device=dev)
a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
side = torch.cuda.Stream()


def step(chunk: int | None, layers: int = 9) -> tuple[float, float]:
    main = torch.cuda.current_stream()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    done = torch.cuda.Event()
    if chunk is not None:
        side.wait_stream(main)
        with torch.cuda.stream(side):
            n = big_host.numel()
            for off in range(0, n, chunk):
                big_dev[off:off + chunk].copy_(big_host[off:off + chunk], non_blocking=True)
            done.record(side)
    for _ in range(layers):
        for _ in range(8):
            a @ a
        rows_host.copy_(rows_dev, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()
        t = time.perf_counter()
        while time.perf_counter() - t < 150e-6:
            pass
        sum_dev.copy_(sum_host, non_blocking=True)
    for _ in range(8):
        a @ a
    main_end = torch.cuda.Event()
    main_end.record()
    main_end.synchronize()
    t_main = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t_main, time.perf_counter() - t0


for _ in range(5):
    step(None), step(1 << 20)
for label, chunk in [("none", None), ("one copy", 1 << 30), ("16 MB", 16 << 20), ("4 MB", 4 << 20),
                     ("1 MB", 1 << 20), ("none", None)]:
    times = [step(chunk) for _ in range(20)]
    main_ms = sorted(t[0] for t in times)[10] * 1e3
    all_ms = sorted(t[1] for t in times)[10] * 1e3
    print(f"{label:>9}: main stream {main_ms:6.2f} ms, with the side copy {all_ms:6.2f} ms (medians of 20)")
