"""Round trips of small messages between two gloo processes on this host, as a pipeline split's decode step
makes them (a plan out, an activation out, an outcome back): mean microseconds a round trip, to tell message
latency from compute in a split's step time. `python gloo_pingpong.py`"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.getcwd())
from strata.runner.pipeline import free_port  # noqa: E402


def worker(rank: int, port: int, rounds: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    control = dist.new_group(backend="gloo")
    plan, act, outcome = (torch.zeros(4096, dtype=torch.uint8), torch.zeros(2, 1, 2048, dtype=torch.bfloat16),
                          torch.zeros(4096, dtype=torch.uint8))
    for trial in range(2):
        started = time.perf_counter()
        for _ in range(rounds):
            if rank == 0:
                works = [dist.isend(plan, 1, group=control, tag=1), dist.isend(act, 1)]
                dist.recv(outcome, 1, group=control, tag=2)
                for w in works:
                    w.wait()
            else:
                dist.recv(plan, 0, group=control, tag=1)
                dist.recv(act, 0)
                dist.isend(outcome, 0, group=control, tag=2).wait()
        if rank == 0 and trial:
            print(f"gloo round trip (plan + activations out, outcome back): "
                  f"{(time.perf_counter() - started) / rounds * 1e6:.0f} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(), 200), nprocs=2)
