"""Steps no single uniform layout fits, replayed as graphs anyway: fresh prompts beside decode or verification
windows. Functions of the ModelRunner (they use its graphs, tables and speculation), kept apart from its plain steps.

Such a step replays one graph per part (split_layouts: the windows' graph, then the prompts' groups), else it runs
eagerly (the caller's fallback when these return None). With STRATA_MIXED_GRAPHS=1 it first tries one mixed graph
of both (cuda_graphs.mixed_layout: the weights read once, not once per part). Not the default: on Qwen4-Exp (4
layers, bf16, an H100, session 65) a mixed step took 11.7 ms against 10.9-11.3 for the two graphs (a 64-token prompt
already reads most of a 512-expert layer, so the windows' graph adds little), and each new mixed layout is captured
when a step first brings it (a few hundred ms there, inside the run). Either way the step's rows come back in plan
order.

Verification windows of a model with recurrent state need their per-token states at the step's own rows (commit
rolls back by row): their graph holds them first, so the windows must be the plan's first slots.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from strata.config import debug_flag
from strata.runner.cuda_graphs import StepPart
from strata.runner.inputs import StepInputs
from strata.transfer import index_tensor
from strata.types import StepPlan

if TYPE_CHECKING:
    from strata.runner.model_runner import ModelRunner


def forward_split(runner: ModelRunner, plan: StepPlan) -> tuple[StepInputs, torch.Tensor] | None:
    """Fresh prompts beside windows (or alone) as graph replays, in place of an eager step: -> inputs and hidden
    [T, D] in plan order, or None when some part cannot have a graph. The returned context is the windows' (their
    recorded states), or, when the MTP head drafts after this step (its pass reads every row), a whole-step context
    carrying those."""
    graphs, scheduled = runner.graphs, plan.scheduled
    verifies = runner._has_windows(plan)
    mixed = graphs.mixed_layout(scheduled) if runner.stage is None and debug_flag("MIXED_GRAPHS") else None
    if mixed is not None and not (verifies and mixed[1] != list(range(len(mixed[1])))):
        done = forward_mixed(runner, plan, *mixed)
        if done is not None:
            return done
    parts = graphs.split_layouts(scheduled)
    if parts is None:
        return None
    if verifies:
        windows = parts[0][1]
        if windows != list(range(len(windows))) or not scheduled[0].draft_token_ids:
            return None
    if not all(graphs.ensure(key) for key, _ in parts):
        return None
    starts = list(itertools.accumulate((w.num_new_tokens for w in scheduled[:-1]), initial=0))
    total = starts[-1] + scheduled[-1].num_new_tokens
    # under a split the step still crosses each boundary in one message, its rows in plan order (as an
    # eager step's): received before the first part, sent after the last
    stage, received, outputs = runner.stage, None, None
    if stage is not None and not stage.is_first:
        received = stage.step_activations(total)                                      # A x [T, W]
    if stage is not None and not stage.is_last:
        kept = graphs.graphs[parts[0][0]].stage_outputs                               # A x [R, W]
        outputs = [a.new_empty(total, a.shape[1]) for a in kept]                      # A x [T, W]
    input_ids = hidden = ctx = None
    for key, indices in parts:
        part = StepPart([starts[i] for i in indices], received, outputs) if stage is not None else None
        step = graphs.run(key, [scheduled[i] for i in indices], runner.block_tables, part=part)
        if step is None:  # captured a moment ago: only a failing replay gets here
            raise RuntimeError(f"CUDA graph {key} was captured but could not be replayed")
        if ctx is None:
            ctx = step.ctx
            input_ids = step.input_ids.new_empty(total)                               # [T]
            hidden = step.hidden.new_empty(total, step.hidden.shape[1])               # [T, D]
        # copied out now (stream order): the next part refills the shared inputs and may replay
        # the same graph, overwriting its output
        for j, i in enumerate(indices):
            first, start, n = j * key[1], starts[i], scheduled[i].num_new_tokens
            input_ids[start:start + n].copy_(step.input_ids[first:first + n])
            hidden[start:start + n].copy_(step.hidden[first:first + n])
    if outputs is not None:
        stage.pass_on(*outputs)
    runner.graph_part_steps += 1
    if stage is None or stage.is_last:
        ctx = _with_mtp_context(runner, plan, ctx)
    return StepInputs(input_ids, ctx, starts, replayed=True), hidden


def forward_mixed(runner: ModelRunner, plan: StepPlan, key: tuple, windows: list[int], prompts: list[int]
                  ) -> tuple[StepInputs, torch.Tensor] | None:
    """Fresh prompts beside windows as one mixed graph: -> inputs and hidden [T, D] in plan order, or None when
    the layout cannot be captured."""
    scheduled = plan.scheduled
    replayed = runner.graphs.run_mixed(key, [scheduled[i] for i in windows], [scheduled[i] for i in prompts],
                                       runner.block_tables)
    if replayed is None:
        return None
    step, graph_starts = replayed
    graph_rows: list[range] = [range(0)] * len(scheduled)  # each slot's rows in the graph, in plan order
    for i, first in zip(windows + prompts, graph_starts):
        graph_rows[i] = range(first, first + scheduled[i].num_new_tokens)
    rows = index_tensor([r for slot in graph_rows for r in slot], step.hidden.device)                # [T]
    input_ids, hidden = step.input_ids.index_select(0, rows), step.hidden.index_select(0, rows)      # [T], [T, D]
    runner.graph_mixed_steps += 1
    starts = list(itertools.accumulate((w.num_new_tokens for w in scheduled[:-1]), initial=0))
    return StepInputs(input_ids, _with_mtp_context(runner, plan, step.ctx), starts, replayed=True), hidden


def _with_mtp_context(runner: ModelRunner, plan: StepPlan, ctx):
    """`ctx`, or where the MTP head drafts after this step (its pass reads every row) a whole-step context carrying
    the window states `ctx` recorded."""
    if not runner.speculation.needs_whole_step(plan.scheduled):
        return ctx
    whole = runner._mtp_context(plan.scheduled, runner.block_tables)
    whole.scratch.window_states = ctx.scratch.window_states
    return whole
