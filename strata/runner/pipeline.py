"""Pipeline (layer) split over several processes, one per device (--pipeline-parallel-size, vLLM's name).

Every stage runs the same ModelRunner on the same plans (SPMD), so everything a plan drives happens on
every stage for the layers it owns: KV blocks, recurrent states, checkpoints, parks, restores, prefix reuse
and preemption. Each stage builds and loads only its own layers (decoder.owning_layers; the embedding, final
norm and LM head on every stage). Stage 0 is the engine's own process: its runner hands each plan to the
others before it runs it (`share_plan`); the others' processes are engine/pipeline_workers.py. Inside a
forward only activations cross (hidden and residual at each split point, `pass_on` / `take_over`). The last
stage owns the final norm, the LM head and the MTP head: it samples, verifies and proposes drafts, and shares
the step's outcome with every stage (`share_outcome`), so each rolls its own recurrent layers back to the
accepted prefix and stage 0 commits the tokens.

torch.distributed carries it: gloo between CPU processes (the tests), NCCL between GPUs (not yet run). Not
yet: batch groups pipelined across stages (one step occupies one stage at a time), CUDA graphs across a split
(a split model runs eagerly), a memory plan per card, overlapped scheduling (off under a split).
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


def layer_ranges(num_layers: int, world: int) -> list[tuple[int, int]]:
    """Layers [first, end) of each stage: as even as possible, earlier stages one more where uneven."""
    if not 1 <= world <= num_layers:
        raise ValueError(f"pipeline_parallel_size must be between 1 and the model's {num_layers} layers, got {world}")
    base, extra = divmod(num_layers, world)
    ends = [sum(base + (1 if s < extra else 0) for s in range(r + 1)) for r in range(world)]
    return [(end - base - (1 if r < extra else 0), end) for r, end in enumerate(ends)]


@dataclass
class Stage:
    rank: int
    world: int
    first_layer: int
    end_layer: int
    num_layers: int
    workers: list = field(default_factory=list)  # stage 0: the other stages' processes

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.world - 1

    def owns(self, layer: int) -> bool:
        """Whether this stage keeps `layer`'s caches (the MTP layer, numbered num_layers, is the last stage's)."""
        return self.first_layer <= layer < self.end_layer or (layer >= self.num_layers and self.is_last)

    # ---- activations --------------------------------------------------------------------------------

    def pass_on(self, hidden: torch.Tensor, residual: torch.Tensor) -> None:
        """hidden [T, D] and residual [T, D] at this stage's end -> the next stage."""
        dist.send(hidden.contiguous(), self.rank + 1)
        dist.send(residual.contiguous(), self.rank + 1)

    def take_over(self, num_tokens: int, dim: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The previous stage's hidden [T, D] and residual [T, D]."""
        hidden = torch.empty(num_tokens, dim, dtype=dtype, device=device)
        residual = torch.empty(num_tokens, dim, dtype=dtype, device=device)
        dist.recv(hidden, self.rank - 1)
        dist.recv(residual, self.rank - 1)
        return hidden, residual

    # ---- plans and outcomes ----------------------------------------------------------------------------

    def share_plan(self, plan) -> None:
        """Stage 0: the plan about to run (None: stop) -> every other stage."""
        dist.broadcast_object_list([plan], src=0)

    def next_plan(self):
        """The other stages: the next plan stage 0 runs (None: stop)."""
        box = [None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self, timeout: float = 30.0) -> None:
        """Stage 0: stop every other stage and leave the group (once)."""
        if not dist.is_initialized():
            return
        self.share_plan(None)
        for worker in self.workers:
            try:
                worker.wait(timeout)
            except Exception:  # subprocess.TimeoutExpired: it did not leave in time
                worker.kill()
        dist.destroy_process_group()

    def agree(self, values: list[int], device) -> list[int]:
        """The smallest of each value over the stages: what every stage can hold (the scheduler's block ids,
        slots and rows are the same on every stage, so their pools must be the same size)."""
        numbers = torch.tensor(values, dtype=torch.int64, device=device)
        dist.all_reduce(numbers, op=dist.ReduceOp.MIN)
        return numbers.tolist()

    def share_outcome(self, outcome=None):
        """The last stage's speculation outcome of a step (what it passes) -> every stage (what each gets)."""
        box = [outcome]
        dist.broadcast_object_list(box, src=self.world - 1)
        return box[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_group(rank: int, world: int, port: int, device: str) -> None:
    """Join the split's process group. No collective timeout to speak of: an idle server's stages wait for
    the next plan as long as it takes (a stage whose peer died sees the connection close instead)."""
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if backend == "nccl":  # a GPU per stage (NCCL wants each rank's device current before its first collective)
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(days=365))
