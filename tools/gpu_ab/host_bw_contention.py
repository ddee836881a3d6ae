"""Do the CPU experts and the KV staging ring's copies share host memory bandwidth? (issue 26, session 27's open
question). Measures, alone and together: host reads by torch's CPU threads (a sum over 1 GiB, as the CPU experts
read their weights) and pinned host-to-device copies of 112 MB (one layer's host tier at 128K tokens, fp8), each
as GB/s over ~2 s. `python3 host_bw_contention.py [threads]` (default 15, the engine's CPU experts)."""
import sys
import threading
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.set_num_threads(threads)
weights = torch.ones(1 << 28, dtype=torch.float32)  # 1 GiB, pageable like the expert weights
pinned = torch.empty(112 << 20, dtype=torch.uint8).pin_memory()
device = torch.empty(pinned.shape, dtype=torch.uint8, device="cuda")
copy_stream = torch.cuda.Stream()


def cpu_reads(seconds: float, out: list) -> None:
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        weights.sum()
        done += weights.numel() * 4
    out.append(done / (time.perf_counter() - started) / 1e9)


def copies(seconds: float, out: list) -> None:
    done, started = 0, time.perf_counter()
    with torch.cuda.stream(copy_stream):
        while time.perf_counter() - started < seconds:
            device.copy_(pinned, non_blocking=True)
            copy_stream.synchronize()
            done += pinned.numel()
    out.append(done / (time.perf_counter() - started) / 1e9)


for label, jobs in [("CPU reads alone", [cpu_reads]), ("copies alone", [copies]),
                    ("both at once", [cpu_reads, copies]), ("CPU reads alone", [cpu_reads])]:
    results = {job.__name__: [] for job in jobs}
    workers = [threading.Thread(target=job, args=(2.0, results[job.__name__])) for job in jobs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"{label:>16}: " + ", ".join(f"{name} {r[0]:6.1f} GB/s" for name, r in results.items()), flush=True)
