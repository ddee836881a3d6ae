"""Verification steps planned ahead, the runner's side (spec/verify_ahead.py has the idea and the device-side
verdicts): launch a step of equal verification windows whose verdicts stay on the device, fed and moved by the
step before it when that one is still in flight, and read a launched one later. Functions of the ModelRunner
(they use its forward, slots and pools), kept apart from its plain steps.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from strata.config import debug_flag
from strata.spec.commit import commit_outcomes
from strata.spec.verify_ahead import (VerifyInFlight, greedy_verdicts, roll_back_states, sampled_verdicts,
                                      shift_context, synthetic_verdicts)
from strata.spec.verify_step import SlotOutcome
from strata.transfer import index_tensor
from strata.types import ScheduledSlot, SlotResult, StepPlan, StepResult

if TYPE_CHECKING:
    from strata.runner.inputs import StepInputs
    from strata.runner.model_runner import ModelRunner


def verifies_ahead(runner: ModelRunner, plan: StepPlan) -> bool:
    """Whether `plan`'s verification windows (and the next step's) can be launched before the step they follow
    was read: the whole model in this process, no host KV tier, no experts computed on the host, and synthetic
    drafts, or (STRATA_DRAFTS_AHEAD=1) suffix drafts or MTP drafts without a probability floor, every window
    wanting the same number next. STRATA_NO_VERIFY_AHEAD=1 turns it off (one step at a time, for A/B runs)."""
    drafter = runner.speculation.drafter
    if drafter is None or debug_flag("NO_VERIFY_AHEAD") or runner.stage is not None or runner.host_kv is not None \
            or (runner.experts is not None and runner.experts.offloaded):
        return False
    if drafter.synthetic is not None:
        return True
    return ((drafter.spec.method == "suffix" or drafter.spec.method == "mtp" and drafter.spec.draft_prob_floor == 0)
            and debug_flag("DRAFTS_AHEAD") and len({w.next_k for w in plan.scheduled}) == 1
            and plan.scheduled[0].next_k > 0 and all(runner.sampler.params[w.slot_id] is not None
                                                     for w in plan.scheduled))


def save_at_boundaries(runner: ModelRunner, plan: StepPlan, slot_ids: list[int], shift: torch.Tensor) -> None:
    """plan.boundary_saves (Scheduler._boundary_save): each such slot's state, rolled back by the step before, into
    its checkpoint row where its window really starts at the block boundary (planned start + shift [S], on the
    device), before the forward moves the state on."""
    row_of = {slot: i for i, slot in enumerate(slot_ids)}
    host = torch.tensor([[row_of[slot], start, boundary, slot, row] for slot, row, start, boundary in
                         plan.boundary_saves], dtype=torch.long).T.contiguous()            # [5, P]
    which, start, boundary, slots, rows = index_tensor(host, shift.device).unbind(0)       # each [P], contiguous
    runner.checkpoint_pool.save_where(torch.where(start + shift[which] == boundary, slots, -1), rows)


def launch(runner: ModelRunner, plan: StepPlan, inputs_from: VerifyInFlight | None = None) -> VerifyInFlight:
    """A step of equal verification windows (1 + k rows a slot) queued up to its verdicts, which stay on the
    device, and (MTP) the next window's drafts. With `inputs_from` (the step before, not yet read; `plan` was
    planned as if it accepted every draft) each window starts at that step's bonus token, takes its drafts,
    and moves back by its shortfall."""
    runner._update_slots(plan)
    slot_ids = [w.slot_id for w in plan.scheduled]
    window = plan.scheduled[0].num_new_tokens
    drafter = runner.speculation.drafter
    feed = shift = verified = None
    if drafter.suffix is not None:  # the host's drafts, as if the step in flight accepted all of its own
        verified = [w.draft_token_ids for w in plan.scheduled] if inputs_from is None else \
            suffix_drafts(runner, slot_ids, window - 1, inputs_from.verified_by_slot())
    if inputs_from is not None:
        drafts = index_tensor(verified, inputs_from.bonus.device) if verified is not None else None
        feed, shift = inputs_from.next_inputs(slot_ids, window, drafts)             # [S * n], [S]
        if plan.boundary_saves:
            save_at_boundaries(runner, plan, slot_ids, shift)
    inputs, hidden, expert_pairs, started = runner._queue_forward(plan, feed, shift)
    rows, num_slots = len(slot_ids) * window, len(slot_ids)
    logits = inputs.logits() if inputs.logits is not None else runner.model.compute_logits(hidden)  # [S * n, V]
    accepted_in = [drafter.synthetic.propose_synthetic(window - 1, s) for s in slot_ids] \
        if drafter.synthetic is not None else None
    greedy = all(runner.sampler.params[s].is_greedy for s in slot_ids)
    found = runner.graphs.verdicts(inputs.layout, num_slots, accepted_in) \
        if inputs.layout is not None and (accepted_in is not None or greedy) else None
    if found is not None:  # the verdicts and the states' roll-back replayed as graphs of the layout
        tokens, accepted, bonus = found.tokens, found.accepted, found.bonus
    else:
        tokens, accepted, bonus = eager_verdicts(runner, plan, logits[:rows], inputs.input_ids[:rows], accepted_in)
        if runner._has_windows(plan):
            roll_back_states(runner.state_pool.caches, inputs.ctx.scratch.window_states,
                             index_tensor(slot_ids, accepted.device), window, accepted)
    next_drafts = mtp_drafts(runner, plan, inputs, hidden, accepted, bonus, shift) if drafter.spec.uses_mtp else None
    host_drafts, copied = next_drafts, None
    if found is not None:
        packed = runner.graphs.verify.to_host(found.packed)                             # [S, n + 1]
        host_tokens, host_accepted = packed[:, :window], packed[:, window]
    else:
        host_tokens, host_accepted = tokens, accepted
    if tokens.is_cuda:  # read back through an event: the step queued after this one must not delay it
        if found is None:
            host_tokens, host_accepted = (torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)
                                          for t in (tokens, accepted))
        if next_drafts is not None:
            host_drafts = torch.empty(next_drafts.shape, dtype=next_drafts.dtype, pin_memory=True)
            host_drafts.copy_(next_drafts, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
    return VerifyInFlight(plan, slot_ids, tokens, accepted, bonus, host_tokens, host_accepted, copied, expert_pairs,
                          started, time.perf_counter(), next_drafts, host_drafts, verified)


def eager_verdicts(runner: ModelRunner, plan: StepPlan, logits: torch.Tensor, input_ids: torch.Tensor,
                   accepted_in: list[int] | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [S * n, V], input ids [S * n] -> (tokens [S, n], accepted [S], bonus [S]): synthetic ones for the
    drafter's accepted counts `accepted_in`, else greedy ones, then speculative sampling for the sampled windows."""
    num_slots, window = len(plan.scheduled), plan.scheduled[0].num_new_tokens
    if accepted_in is not None:
        accepted = index_tensor(accepted_in, logits.device)                                 # [S]
        tokens, bonus = synthetic_verdicts(logits, num_slots, window, accepted)
        return tokens, accepted, bonus
    drafts = input_ids.view(num_slots, window)[:, 1:]                                      # [S, k]: what was verified
    tokens, accepted, bonus = greedy_verdicts(logits, num_slots, window, drafts)
    sample_windows(runner, plan, logits, drafts, tokens, accepted, bonus)
    return tokens, accepted, bonus


def suffix_drafts(runner: ModelRunner, slot_ids: list[int], k: int, in_flight: dict[int, list[int]]
                  ) -> list[list[int]]:
    """Each slot's k suffix drafts for a window that follows a step not yet read: matched as if that step
    accepted its drafts `in_flight`, the match's next token standing for its bonus token; short proposals are
    filled with their last token (a uniform window, as the scheduler fills them)."""
    suffix, drafts = runner.speculation.drafter.suffix, []
    for slot_id in slot_ids:
        pending = in_flight.get(slot_id, [])
        proposal = suffix.propose(slot_id, k + 1, pending)[1:]
        filler = (proposal or pending or suffix.tokens_of(slot_id)[-1:])[-1]
        drafts.append(proposal + [filler] * (k - len(proposal)))
    return drafts


def sample_windows(runner: ModelRunner, plan: StepPlan, logits: torch.Tensor, drafts: torch.Tensor,
                   tokens: torch.Tensor, accepted: torch.Tensor, bonus: torch.Tensor) -> None:
    """The verdicts of the plan's sampled (not greedy) windows, by speculative sampling on the device, written
    over their greedy ones in tokens [S, n], accepted [S] and bonus [S]."""
    window = plan.scheduled[0].num_new_tokens
    sampled = [i for i, w in enumerate(plan.scheduled) if not runner.sampler.params[w.slot_id].is_greedy]
    if not sampled:
        return
    rows = [i * window + j for i in sampled for j in range(window)]
    probs = runner.sampler.window_probs(logits[index_tensor(rows, logits.device)],
                                      [plan.scheduled[i].slot_id for i in sampled for _ in range(window)])
    at = index_tensor(sampled, logits.device)
    emitted, sampled_accepted, final = sampled_verdicts(probs, drafts[at], runner.sampler.shared_generator)
    tokens.index_copy_(0, at, emitted)
    accepted.index_copy_(0, at, sampled_accepted)
    bonus.index_copy_(0, at, final)


def mtp_drafts(runner: ModelRunner, plan: StepPlan, inputs: StepInputs, hidden: torch.Tensor, accepted: torch.Tensor,
                      bonus: torch.Tensor, shift: torch.Tensor | None) -> torch.Tensor:
    """The MTP head's drafts for the next window of every slot, from the device's verdicts: pass 1 over the
    step's rows (the bonus token after each slot's last accepted row), then one-token passes at the positions
    after it, planned as if every draft was accepted and moved back on the device -> [S, k'] token ids."""
    num_slots, window = len(plan.scheduled), plan.scheduled[0].num_new_tokens
    k_next = plan.scheduled[0].next_k
    last = torch.arange(num_slots, device=hidden.device) * window + accepted        # [S] rows of the last accepted
    shifted = torch.roll(inputs.input_ids, -1)
    shifted[last] = bonus
    state = runner.model.mtp_forward(shifted, hidden, inputs.ctx)[last]               # [S, D]
    tokens = [torch.softmax(runner.model.draft_logits(state), dim=-1).argmax(dim=-1)]  # [S]
    # the last accepted token's position: the planned last row, moved by this step's and the verdict's shortfall
    moved = accepted - (window - 1) + (shift if shift is not None else 0)           # [S]
    for step in range(1, k_next):
        work = [ScheduledSlot(w.slot_id, w.num_computed_tokens + window - 1 + step, 1, [], [0])
                for w in plan.scheduled]
        ctx = shift_context(runner._mtp_context(work, runner.block_tables), moved)
        state = runner.model.mtp_forward(tokens[-1], state, ctx)
        tokens.append(torch.softmax(runner.model.draft_logits(state), dim=-1).argmax(dim=-1))
    return torch.stack(tokens, dim=1)


def complete(runner: ModelRunner, step: VerifyInFlight) -> StepResult:
    """Read a launched verification step's verdicts (the one host sync) and commit the accepted tokens to the
    sampler's and drafter's history. A slot whose request ended while the step ran is left out."""
    waited = time.perf_counter()
    if step.copied is not None:
        step.copied.synchronize()
    tokens, accepted = step.host_tokens.tolist(), step.host_accepted.tolist()
    drafted = step.host_drafts.tolist() if step.host_drafts is not None else None
    read = time.perf_counter()
    window = step.plan.scheduled[0].num_new_tokens
    live = [(i, work) for i, work in enumerate(step.plan.scheduled) if runner.sampler.params[work.slot_id] is not None]
    outcomes = [SlotOutcome(work.slot_id, tokens[i][:accepted[i] + 1], window - 1, accepted[i],
                            i * window + accepted[i]) for i, work in live]
    commit_outcomes(outcomes, runner.sampler, runner.speculation.drafter, runner.state_pool.caches, None)
    results = []
    suffix = runner.speculation.drafter.suffix
    for (i, work), outcome in zip(live, outcomes):
        # the next step's drafts, for a step planned the usual way after this one: the MTP head's, the suffix
        # matches after this commit, or (synthetic) placeholders as the proposer makes them
        drafts = drafted[i][:work.next_k] if drafted is not None else \
            suffix.propose(work.slot_id, work.next_k) if suffix is not None else [outcome.token_ids[-1]] * work.next_k
        results.append(SlotResult(work.slot_id, outcome.token_ids, outcome.num_accepted, drafts))
    return StepResult(step.plan.step_id, results, forward_seconds=step.launched - step.started,
                      sample_seconds=read - waited, draft_seconds=0.0, expert_pairs=step.expert_pairs)
