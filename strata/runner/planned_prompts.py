"""Prompts queued behind the verification steps in flight (--async-scheduling with STRATA_PROMPTS_AHEAD=1), the
runner's side: when requests are admitted while a verification step runs and the next one is already planned ahead
of it, their prompts go to the device as steps of their own right behind both (Scheduler.schedule_prompts_ahead: a
step a chunk), each first token sampled on the device and read after them. The device goes from the windows to the
prompts without waiting for the host to read a step, where the usual step of windows beside prompts waits for it;
the device work is the same (a step of windows beside prompts replays the windows' graph, then the prompts'). The
next verification step is planned ahead with their first windows (planned_verification.launch: after the windows
the step in flight feeds). Opt-in until measured on a GPU (tools/gpu_ab/next_call105.sh). Functions of the
ModelRunner, kept apart like planned_decode.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from strata.config import debug_flag
from strata.runner import planned_decode
from strata.runner.planned_decode import DecodeInFlight
from strata.transfer import index_tensor
from strata.types import SlotResult, StepPlan, StepResult

if TYPE_CHECKING:
    from strata.runner.model_runner import ModelRunner


def launches_prompts_ahead(runner: ModelRunner) -> bool:
    """Whether prompts may be launched behind steps not yet read: STRATA_PROMPTS_AHEAD=1, the whole model in this
    process, no host KV tier, no experts computed on the host, and drafts that need no forward of their own after
    a prompt (synthetic or suffix drafts; an MTP head drafts from the prompt's hidden states and writes its KV on
    them)."""
    drafter = runner.speculation.drafter
    if not debug_flag("PROMPTS_AHEAD") or runner.stage is not None or runner.host_kv is not None \
            or (runner.experts is not None and runner.experts.offloaded):
        return False
    return drafter is not None and not drafter.spec.uses_mtp


def launch(runner: ModelRunner, plan: StepPlan) -> DecodeInFlight:
    """A step of prompt chunks (no drafts) queued up to the first tokens of the chunks that end their prompts,
    sampled on the device and left there; the steps before it may still be running."""
    runner._update_slots(plan)
    inputs, hidden, expert_pairs, started = runner._queue_forward(plan)             # hidden [T, D]
    sampling = [(work, start) for work, start in zip(plan.scheduled, inputs.query_starts) if work.sample]
    step = DecodeInFlight(plan, [work.slot_id for work, _ in sampling], None, None, None, expert_pairs, started)
    if sampling:
        rows = index_tensor([start + work.num_new_tokens - 1 for work, start in sampling], hidden.device)  # [S]
        logits = inputs.logits()[rows] if inputs.logits is not None else runner.model.compute_logits(hidden[rows])
        planned_decode.read_back(step, runner.sampler.sample_on_device(logits, step.slot_ids))  # [S]
    step.launched = time.perf_counter()
    return step


def complete(runner: ModelRunner, step: DecodeInFlight) -> StepResult:
    """Read the prompts' first tokens (the one host sync), commit them, and give each the drafts its next window
    wants (the drafter's own proposals, as after any prompt step)."""
    if not step.slot_ids:
        runner._finished_through = step.plan.step_id
        return StepResult(step.plan.step_id, [], forward_seconds=step.launched - step.started,
                          expert_pairs=step.expert_pairs)
    result = planned_decode.complete(runner, step)
    # synthetic or suffix drafts (launches_prompts_ahead): made on the host, no forward of their own
    drafts = runner.speculation.drafter.propose(step.plan.scheduled, [], None, None, None, [], runner.block_tables)
    result.slots = [SlotResult(r.slot_id, r.token_ids, r.num_accepted, drafts.get(r.slot_id, [])) for r in result.slots]
    return result
