"""Decode steps planned ahead (--async-scheduling), the runner's side: launch a decode step up to its sampled
tokens, which stay on the device, fed by the step before it when that one is still in flight, and read a launched
one later. Functions of the ModelRunner (they use its forward, slots and sampler), kept apart from its plain steps.

Under a pipeline split every stage launches the same decode steps (stage 0 shares each plan with the step whose
tokens feed it). The last stage samples and sends the token ids to every other stage (`Stage.send_tokens`, from
device to device where each stage has a GPU); the others receive them, in launch order, when a step they launched
needs them as its inputs or when they read it. No step's outcome object crosses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from strata.transfer import index_tensor
from strata.types import SlotResult, StepPlan, StepResult

if TYPE_CHECKING:
    from strata.runner.model_runner import ModelRunner


@dataclass
class DecodeInFlight:
    """A decode step launched by launch_decode whose sampled tokens have not been read."""

    plan: StepPlan
    slot_ids: list[int]                     # plan order
    token_ids: torch.Tensor | None          # [S] sampled on the device (a split's earlier stages: once received)
    host_ids: torch.Tensor | None           # [S] their copy in host memory (the same tensor on the CPU)
    copied: torch.cuda.Event | None         # recorded after that copy (CUDA)
    expert_pairs: dict
    started: float
    launched: float = 0.0


def launch(runner: ModelRunner, plan: StepPlan, inputs_from: DecodeInFlight | None = None) -> DecodeInFlight:
    """A decode step (one sampled token per slot, no drafts, no speculation) queued up to its sampled tokens,
    which stay on the device. With `inputs_from`, each slot's input token is the one that step samples for it
    (fed on the device: the host never waits for it)."""
    stage = runner.stage
    if stage is not None and stage.is_first:
        stage.share_plan(plan, runner._finished_through,
                         decode_from=inputs_from.plan.step_id if inputs_from is not None else -1)
    runner._update_slots(plan)
    feed = None
    if inputs_from is not None:
        tokens = sampled_tokens(runner, inputs_from)                              # [S'] on the device
        row_of = {slot_id: row for row, slot_id in enumerate(inputs_from.slot_ids)}
        rows = [row_of[w.slot_id] for w in plan.scheduled]
        feed = tokens if rows == list(range(len(inputs_from.slot_ids))) else tokens[index_tensor(rows, tokens.device)]
    inputs, hidden, expert_pairs, started = runner._queue_forward(plan, feed)   # hidden [S, D]: one row per slot
    step = DecodeInFlight(plan, [w.slot_id for w in plan.scheduled], None, None, None, expert_pairs, started)
    if stage is None or stage.is_last:
        logits = inputs.logits() if inputs.logits is not None else runner.model.compute_logits(hidden)  # [S, V]
        token_ids = runner.sampler.sample_on_device(logits, step.slot_ids)         # [S]
        if stage is not None:
            stage.send_tokens(token_ids)
        _read_back(step, token_ids)
    else:
        runner.awaiting_tokens.append(step)
    step.launched = time.perf_counter()
    return step


def sampled_tokens(runner: ModelRunner, step: DecodeInFlight) -> torch.Tensor:
    """The token ids [S] `step` samples, on this stage's device: a split's earlier stages receive every step's
    they launched before it first (the last stage sends them in launch order)."""
    while step.token_ids is None:
        waiting = runner.awaiting_tokens.popleft()
        _read_back(waiting, runner.stage.receive_tokens(len(waiting.slot_ids), runner.device))
    return step.token_ids


def _read_back(step: DecodeInFlight, token_ids: torch.Tensor) -> None:
    """Keep the step's token ids [S] and start their copy to the host, through an event: a step queued after
    this one must not delay it."""
    step.token_ids, step.host_ids = token_ids, token_ids
    if token_ids.is_cuda:
        step.host_ids = torch.empty(token_ids.shape, dtype=token_ids.dtype, pin_memory=True)
        step.host_ids.copy_(token_ids, non_blocking=True)
        step.copied = torch.cuda.Event()
        step.copied.record()


def complete(runner: ModelRunner, step: DecodeInFlight) -> StepResult:
    """Read a launched decode step's tokens (the one host sync) and commit them to the sampler. A slot whose
    request ended while the step ran (its slot since released) is left out."""
    runner._finished_through = step.plan.step_id
    waited = time.perf_counter()
    sampled_tokens(runner, step)
    if step.copied is not None:
        step.copied.synchronize()
    token_ids = step.host_ids.tolist()
    read = time.perf_counter()
    results = []
    for slot_id, token_id in zip(step.slot_ids, token_ids):
        if runner.sampler.params[slot_id] is None:
            continue
        runner.speculation.commit_decoded(slot_id, token_id)
        results.append(SlotResult(slot_id, [token_id], 0, []))
    return StepResult(step.plan.step_id, results, forward_seconds=step.launched - step.started,
                      sample_seconds=read - waited, draft_seconds=0.0, expert_pairs=step.expert_pairs)
