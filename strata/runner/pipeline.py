"""Pipeline (layer) split over several processes, one per device (--pipeline-parallel-size, vLLM's name).

Every stage runs the same ModelRunner on the same plans (SPMD), so everything a plan drives happens on
every stage for the layers it owns: KV blocks, recurrent states, checkpoints, parks, restores, prefix reuse
and preemption. Each stage builds and loads only its own layers and the parts it runs (decoder.owning_layers:
the embedding on the first, the final norm or stream mixer, LM head and MTP head on the last). Stage 0 is the
engine's own process: its runner hands each plan to the others before it runs it (`share_plan`); the others'
processes are engine/pipeline_workers.py. Inside a forward only activations cross (hidden and residual at each
split point, or Qwen4-Exp's residual streams: `pass_on` / `take_over`). The last stage samples, verifies and
proposes drafts, and shares the step's outcome with every stage (`share_outcome`), so each rolls its own
recurrent layers back to the accepted prefix and stage 0 commits the tokens. A step that fails on a stage leaves
the others out of step: the engine stops (SplitBroken).

Batch groups (--batch-groups): stage 0 keeps up to G steps in flight, each over its own group of slots; a
stage never waits for its sends (activations, plans, outcomes: `isend`), so while the last stage computes
group g, stage 0 already runs group g+1. Every stage runs the plans in stage 0's order and reads a step's
outcome when stage 0 says it has (`share_plan`'s `finished_through`), so every stage's caches see the same
sequence of operations.

--async-scheduling: a decode step is followed by the next one of the same group, planned and launched before it
is read; the last stage sends the sampled tokens to every stage (`send_tokens`, a group of their own: NCCL on
GPUs), which feed them to that next step on the device (runner/planned_decode.py), so stage 0's host work of a
step (commit, plan, launch) overlaps the stages' forwards.

torch.distributed carries it: gloo between CPU processes (the tests) and for plans and outcomes; NCCL for the
activations and sampled tokens between GPUs (not yet run on two GPUs). CUDA graphs hold a stage's own layers: the
messages go around each replay (`capturing_layers`), one per boundary as in an eager step, its rows in plan order;
a step replayed as several graph parts (fresh prompts beside other slots) receives and sends once for all of them
(`step_activations`, `graph_row_runs`), so stages may differ in how they run a step. Not yet: verification steps
planned ahead.
"""

from __future__ import annotations

import contextlib
import datetime
import pickle
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


class SplitBroken(RuntimeError):
    """A step failed on a pipeline stage: the other stages may be inside that step, waiting for activations or
    an outcome that will not come, and nothing brings them back in step, so the split engine stops (a server
    starts a new one and hands it the requests that had no output yet)."""


_PLAN, _OUTCOME, _SESSION, _TOKENS = 1, 2, 3, 4  # message tags on the control group
_HEAD = 4096  # bytes of an object's first message
_HOST_SENDS_KEPT, _HOST_SEND_BYTES_KEPT = 64, 64 << 20  # gloo sends a stage holds without waiting on them


@dataclass
class Stage:
    rank: int
    world: int
    first_layer: int
    end_layer: int
    num_layers: int
    workers: list = field(default_factory=list)  # stage 0: the other stages' processes
    control: object = None  # the gloo group plans and outcomes travel on (join_group)
    tokens_group: object = None  # the group decode steps' sampled tokens travel on (join_group)
    host_activations: bool = False  # activations cross through host memory (stages sharing a GPU: gloo)
    broken: bool = False  # a step failed here (SplitBroken): the others may never read another message
    graph_rows: int = 0  # rows of the largest CUDA graph layout of this stage's layers (set by the graph cache)
    layouts: list | None = None  # every stage's session_rows.layout, by rank (gathered when the engine is built)
    graph_outputs: list | None = None  # the activations pass_on kept in the last graph capture (capturing_layers)
    _sends: list = field(default_factory=list)  # (work, tensors it reads) of sends not yet known complete
    _in_graph: bool = False
    _graph_inputs: torch.Tensor | None = None  # [A, graph_rows, W]: what replays of this stage's graphs read

    def __post_init__(self) -> None:
        if self.control is None:
            self.control = _control
        if self.tokens_group is None:
            self.tokens_group = _tokens if _tokens is not None else self.control

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.world - 1

    def owns(self, layer: int | tuple[str, int]) -> bool:
        """Whether this stage keeps `layer`'s caches (the MTP layer, numbered num_layers, is the last stage's);
        `layer` may be a cache key naming one (("ple", i), ("index", i): Qwen4-Exp's per-layer extras)."""
        if isinstance(layer, tuple):
            layer = layer[1]
        return self.first_layer <= layer < self.end_layer or (layer >= self.num_layers and self.is_last)

    # ---- sends never wait: a stage goes on with the next group while its last output travels ----------

    def _send(self, tensors: list[torch.Tensor], dst: int, group=None, tag: int = 0) -> None:
        for tensor in tensors:
            self._sends.append((dist.isend(tensor, dst, group=group, tag=tag), tensor))
        self._sends = [(work, t) for work, t in self._sends if not work.is_completed()]
        # a gloo send (host memory) says it is complete only once waited on, so those are kept to a bound and
        # the oldest waited on: long since read in practice (a stage is never more than the steps in flight
        # behind another), so the wait returns at once; without it they piled up, and every send got slower
        on_host = [i for i, (_, t) in enumerate(self._sends) if not t.is_cuda]
        held = sum(self._sends[i][1].nbytes for i in on_host)
        while len(on_host) > _HOST_SENDS_KEPT or held > _HOST_SEND_BYTES_KEPT:
            work, tensor = self._sends.pop(on_host[0])
            work.wait()
            held -= tensor.nbytes
            on_host = [i - 1 for i in on_host[1:]]

    # an object travels as one message of _HEAD bytes (its length, then its first bytes) and, when longer, one
    # more with the rest: a decode step's plan or outcome is one small message (two back to back on one socket
    # can wait for a delayed acknowledgement)
    def _send_object(self, obj, dst: int, tag: int) -> None:
        data = pickle.dumps(obj)
        head = torch.zeros(_HEAD, dtype=torch.uint8)
        head[:8] = torch.tensor([len(data)], dtype=torch.int64).view(torch.uint8)
        first = data[:_HEAD - 8]
        head[8:8 + len(first)] = torch.frombuffer(bytearray(first), dtype=torch.uint8)
        rest = [torch.frombuffer(bytearray(data[_HEAD - 8:]), dtype=torch.uint8)] if len(data) > _HEAD - 8 else []
        self._send([head, *rest], dst, self.control, tag)

    def _recv_object(self, src: int, tag: int):
        head = torch.empty(_HEAD, dtype=torch.uint8)
        dist.recv(head, src, group=self.control, tag=tag)
        size = int(head[:8].view(torch.int64))
        data = head[8:8 + size].numpy().tobytes()
        if size > _HEAD - 8:
            rest = torch.empty(size - (_HEAD - 8), dtype=torch.uint8)
            dist.recv(rest, src, group=self.control, tag=tag)
            data += rest.numpy().tobytes()
        return pickle.loads(data)

    # ---- activations --------------------------------------------------------------------------------

    def pass_on(self, *activations: torch.Tensor) -> None:
        """The activations [T, W] at this stage's end (hidden and residual [T, D]; Qwen4-Exp's streams
        [T, hc * D]) -> the next stage (one message). In a graph capture: kept for send_from_graph."""
        if self._in_graph:
            self.graph_outputs = list(activations)
            return
        stacked = torch.stack(activations)                                        # [A, T, W]
        self._send([stacked.cpu() if self.host_activations else stacked], self.rank + 1)

    def take_over(self, count: int, num_tokens: int, width: int, dtype: torch.dtype, device) -> list[torch.Tensor]:
        """The previous stage's `count` activations [T, W] (what its pass_on sent). In a graph capture: the rows
        receive_for_graph fills before each replay."""
        if self._in_graph:
            if self._graph_inputs is None:  # zeros: a replay's padding rows past the real ones stay finite
                self._graph_inputs = torch.zeros(count, self.graph_rows, width, dtype=dtype, device=device)
            return list(self._graph_inputs[:, :num_tokens].unbind(0))
        stacked = torch.empty(count, num_tokens, width, dtype=dtype, device="cpu" if self.host_activations else device)
        dist.recv(stacked, self.rank - 1)
        return list(stacked.to(device).unbind(0))                                 # A x [T, W]

    # ---- CUDA graphs of a stage's layers: the messages go around the replays, never inside ------------

    @contextlib.contextmanager
    def capturing_layers(self):
        """While a graph of this stage's layers is warmed up and captured (on padding rows): take_over reads the
        stage's graph input rows and pass_on keeps the activations, and no message goes either way; each replay
        is then wrapped by receive_for_graph and send_from_graph. A step sends and receives one message per
        stage boundary whether it replays or runs eagerly, so stages may differ in which steps they replay."""
        self._in_graph, self.graph_outputs = True, None
        try:
            yield
        finally:
            self._in_graph = False

    def receive_for_graph(self, runs: list[tuple[int, int, int]], layout_rows: int,
                          received: list[torch.Tensor] | None = None) -> None:
        """Before a replay (every stage but the first): the step's activations into the rows the graph reads,
        by `runs` of (plan row, graph row, count) (graph_row_runs: a slot's rows start at its index times the
        layout's tokens a slot), the other rows of the layout's `layout_rows` zeros (as the first stage's are
        embeddings of padding tokens, never what earlier replays left). Received now (one message: the step's
        real rows in plan order), or given: `received` (A x [T, W]), a step replayed as several graph parts,
        which receives once for all of them."""
        if self.is_first:
            return
        if received is None:
            received = self.step_activations(sum(count for _, _, count in runs))
        one_run = _leading_run(runs)
        for rows, activation in zip(self._graph_inputs, received):                # [R, W], [T, W]
            if not one_run:
                rows[:layout_rows].zero_()
            for plan, graph, count in runs:
                rows[graph:graph + count].copy_(activation[plan:plan + count])
            if one_run:
                rows[runs[0][2]:layout_rows].zero_()

    def send_from_graph(self, outputs: list[torch.Tensor] | None, runs: list[tuple[int, int, int]],
                        into: list[torch.Tensor] | None = None) -> None:
        """After a replay (every stage but the last): the real rows of the activations its capture kept -> the next
        stage, in plan order (one message; `runs` as receive_for_graph's). With `into` (A x [T, W], a step of
        several graph parts): this part's rows are written there, sent once after the last part (pass_on)."""
        if self.is_last:
            return
        if into is not None:
            for buffer, activation in zip(into, outputs):
                for plan, graph, count in runs:
                    buffer[plan:plan + count].copy_(activation[graph:graph + count])
            return
        if _leading_run(runs):
            self.pass_on(*(activation[:runs[0][2]] for activation in outputs))
        else:  # (runs in plan order, from plan row 0: a whole step's)
            self.pass_on(*(torch.cat([activation[graph:graph + count] for _, graph, count in runs])
                           for activation in outputs))

    def step_activations(self, num_tokens: int) -> list[torch.Tensor]:
        """A step of several graph parts (every stage but the first): its activations A x [T, W], received
        now in one message (what the parts' receive_for_graph then read)."""
        graph_inputs = self._graph_inputs                                          # [A, R, W]
        return self.take_over(graph_inputs.shape[0], num_tokens, graph_inputs.shape[2], graph_inputs.dtype,
                              graph_inputs.device)

    # ---- plans and outcomes ----------------------------------------------------------------------------

    def share_plan(self, plan, finished_through: int = -1, decode_from: int | None = None) -> None:
        """Stage 0: the plan about to run (None: stop), the last step it has finished (read its outcome of;
        plans finish in the order they run) and, for a decode step planned ahead (runner/planned_decode.py),
        the step whose sampled tokens are its inputs (-1: none, the plan holds them) -> every other stage."""
        for dst in range(1, self.world):
            self._send_object((plan, finished_through, decode_from), dst, _PLAN)

    def next_plan(self) -> tuple:
        """The other stages: (the next plan stage 0 runs (None: stop), the last step it has finished, the
        decode step feeding it or -1 where it is a decode step planned ahead, else None)."""
        return self._recv_object(0, _PLAN)

    @property
    def _tokens_on_host(self) -> bool:  # gloo (the control group) carries them, not NCCL
        return self.tokens_group is self.control

    def send_tokens(self, token_ids: torch.Tensor) -> None:
        """The last stage: a decode step's sampled token ids [S] int64 -> every other stage (device to device
        over NCCL, on a group of their own so that they never queue behind the activations going the other
        way; through host memory over gloo)."""
        for dst in range(self.world - 1):
            self._send([token_ids.cpu() if self._tokens_on_host else token_ids], dst, self.tokens_group, _TOKENS)

    def receive_tokens(self, count: int, device) -> torch.Tensor:
        """The other stages: the token ids [count] the last stage sent next (send_tokens), on `device`."""
        token_ids = torch.empty(count, dtype=torch.int64, device="cpu" if self._tokens_on_host else device)
        dist.recv(token_ids, self.world - 1, group=self.tokens_group, tag=_TOKENS)
        return token_ids.to(device)

    def share_outcome(self, outcome=None):
        """The last stage's speculation outcome of a step (what it passes) -> every stage (what each gets)."""
        if self.is_last:
            for dst in range(self.world - 1):
                self._send_object(outcome, dst, _OUTCOME)
            return outcome
        return self._recv_object(self.world - 1, _OUTCOME)

    # ---- session files: stage 0 reads and writes the other stages' rows (runner/session_rows.py) -------------

    def ask(self, rank: int, request):
        """Stage 0: a SessionRows request to stage `rank`, in its plan stream -> its reply."""
        self._send_object((request, -1, None), rank, _PLAN)
        return self._recv_object(rank, _SESSION)

    def tell(self, rank: int, request) -> None:
        """Stage 0: a SessionRows request with no reply (a write) to stage `rank`, in its plan stream."""
        self._send_object((request, -1, None), rank, _PLAN)

    def answer(self, reply) -> None:
        """A stage's reply to stage 0's `ask`."""
        self._send_object(reply, 0, _SESSION)

    def gather(self, value) -> list:
        """Every stage's `value`, by rank (a collective: every stage calls it at the same point)."""
        values = [None] * self.world
        dist.all_gather_object(values, value, group=self.control)
        return values

    def close(self, timeout: float = 30.0) -> None:
        """Stage 0: stop every other stage and leave the group (once). A stage still inside a step that failed
        here (SplitBroken) never reads the stop: its process is killed (after a second when this stage knows the
        split is broken, else after `timeout`)."""
        if not dist.is_initialized():
            return
        timeout = 1.0 if self.broken else timeout
        self.share_plan(None)
        for work, _ in self._sends:
            try:
                work.wait(datetime.timedelta(seconds=timeout))
            except RuntimeError:  # not read in time: that stage is stuck in a broken step
                timeout = 0.0
                break
        for worker in self.workers:
            try:
                worker.wait(timeout)
            except Exception:  # subprocess.TimeoutExpired: it did not leave in time
                worker.kill()
                worker.wait()
        dist.destroy_process_group()

    def agree(self, values: list[int]) -> list[int]:
        """The smallest of each value over the stages: what every stage can hold (the scheduler's block ids,
        slots and rows are the same on every stage, so their pools must be the same size)."""
        numbers = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(numbers, op=dist.ReduceOp.MIN, group=self.control)
        return numbers.tolist()


def graph_row_runs(plan_starts: list[int], num_tokens: list[int], tokens_a_slot: int) -> list[tuple[int, int, int]]:
    """Where a graph layout's slots find their rows: slot i's `num_tokens[i]` real rows are plan rows from
    plan_starts[i] and graph rows from i * tokens_a_slot -> runs of (plan row, graph row, count), adjacent ones
    merged (a decode or windows layout's real rows are one run)."""
    runs: list[list[int]] = []
    for i, (plan, count) in enumerate(zip(plan_starts, num_tokens)):
        graph = i * tokens_a_slot
        if runs and runs[-1][0] + runs[-1][2] == plan and runs[-1][1] + runs[-1][2] == graph:
            runs[-1][2] += count
        else:
            runs.append([plan, graph, count])
    return [tuple(run) for run in runs]


def _leading_run(runs: list[tuple[int, int, int]]) -> bool:
    """Whether a layout's real rows are its first rows, in plan order (decode and verification windows: every slot
    brings the layout's tokens), so they cross as one slice."""
    return len(runs) == 1 and runs[0][:2] == (0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shares_devices(device: str, world: int) -> bool:
    """Whether the stages of a GPU split share GPUs (fewer GPUs than stages, allowed with
    STRATA_PIPELINE_SHARE_GPUS=1: a test of the split on one card, not a speed-up)."""
    return str(device).startswith("cuda") and torch.cuda.device_count() < world


def stage_device(device: str, rank: int, world: int) -> str:
    """The device a stage runs on: a GPU per stage (round robin where they share), the CPU as given."""
    if not str(device).startswith("cuda"):
        return device
    return f"cuda:{rank % torch.cuda.device_count()}"


def join_group(rank: int, world: int, port: int, device: str):
    """Join the split's process group -> the gloo group for plans and outcomes. Activations go over NCCL
    when each stage has a GPU of its own, else over gloo. No collective timeout to speak of: an idle
    server's stages wait for the next plan as long as it takes (a stage whose peer died sees the connection
    close instead)."""
    nccl = str(device).startswith("cuda") and not shares_devices(device, world)
    if str(device).startswith("cuda"):  # NCCL wants each rank's device current before its first collective
        torch.cuda.set_device(stage_device(device, rank, world))
    timeout = datetime.timedelta(days=365)
    dist.init_process_group("nccl" if nccl else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timeout)
    global _control, _tokens
    _control = dist.new_group(backend="gloo", timeout=timeout) if nccl else dist.group.WORLD
    _tokens = dist.new_group(backend="nccl", timeout=timeout) if nccl else None
    return _control


_control = None  # this process's control group, once it has joined (join_group)
_tokens = None  # its NCCL group for sampled tokens (None: they go on the control group)
