"""One step's sampling and verification for every slot that reached the end of its window.

A slot without drafts samples one token from its last row (the plain sampler path, identical to
speculation off). A slot with k drafts owns the last 1 + k rows of its window: greedy slots keep the
longest prefix matching the target argmax (+ the argmax after it), sampled slots go through
rejection sampling against the target's processed distribution (seeded ones keep drafts that equal the tokens
their seed draws at each position, so they emit plain decoding's tokens), synthetic slots accept a drawn
number of drafts built from the target's own tokens. Logit bias and grammar masks apply to every row of
a window first, so a draft the grammar refuses is rejected like any other the target would not emit
(a constrained slot is verified against its real drafts even in synthetic mode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from strata.kernels.argmax import argmax
from strata.sample import Sampler
from strata.spec.synthetic import SyntheticDrafter, synthetic_drafts
from strata.spec.verify import verify_greedy, verify_rejection
from strata.transfer import index_tensor
from strata.types import ScheduledSlot


@dataclass
class SlotOutcome:
    slot_id: int
    token_ids: list[int]          # accepted drafts + the bonus (or the one sampled token)
    num_drafts: int
    num_accepted: int
    last_row: int                 # token row (in the step batch) of the last accepted position
    logprobs: dict[int, float] | None = None


def sample_and_verify(model, sampler: Sampler, hidden: torch.Tensor, scheduled: list[ScheduledSlot],
                      query_starts: list[int], synthetic: SyntheticDrafter | None = None,
                      all_logits: Callable[[], torch.Tensor] | None = None) -> list[SlotOutcome]:
    """hidden [T, D] of the whole step -> one outcome per sampling slot, in plan order. `all_logits`: a graph's
    LM head over all T rows (-> [T, V] float32), read at the rows sampled from instead of computing them."""
    plain, windows = [], []
    for work, start in zip(scheduled, query_starts):
        if not work.sample:
            continue
        last = start + work.num_new_tokens - 1
        (windows if work.draft_token_ids else plain).append((work, last))
    if not plain and not windows:
        return []  # prompt chunks that end before their prompts do: nothing to sample, no LM head to run
    rows = [last for _, last in plain]
    window_starts = []
    for work, last in windows:
        window_starts.append(len(rows))
        rows.extend(range(last - len(work.draft_token_ids), last + 1))
    # grammar masks: filled on the CPU while the forward still runs (what follows waits for it)
    sampler.prepare_constraints([(w.slot_id, 0, []) for w, _ in plain] +
                                [(w.slot_id, 0, w.draft_token_ids) for w, _ in windows])
    index = index_tensor(rows, hidden.device)
    logits = all_logits()[index] if all_logits is not None else model.compute_logits(hidden[index])  # [R, V]
    outcomes = {}
    if plain:
        out = sampler.sample(logits[: len(plain)], [w.slot_id for w, _ in plain])
        for i, (work, last) in enumerate(plain):
            outcomes[work.slot_id] = SlotOutcome(work.slot_id, [out.token_ids[i]], 0, 0, last, out.logprobs[i])
    if windows:
        for (work, last), (tokens, num_accepted) in zip(windows, _verify(
                sampler, logits, windows, window_starts, synthetic)):
            first_row = last - len(work.draft_token_ids)
            outcomes[work.slot_id] = SlotOutcome(work.slot_id, tokens, len(work.draft_token_ids), num_accepted,
                                                 first_row + num_accepted)
    return [outcomes[w.slot_id] for w in scheduled if w.slot_id in outcomes]


def _verify(sampler: Sampler, logits: torch.Tensor, windows, window_starts: list[int],
            synthetic: SyntheticDrafter | None) -> list[tuple[list[int], int]]:
    drafts = [work.draft_token_ids for work, _ in windows]
    logits = sampler.constrain_windows(logits, [(work.slot_id, start, d)
                                                for (work, _), start, d in zip(windows, window_starts, drafts)])
    verdicts: dict[int, tuple[list[int], int]] = {}
    pending = list(range(len(windows)))
    free = [] if synthetic is None else [i for i in pending if not sampler.constraints.has_grammar(windows[i][0].slot_id)]
    if free:  # benchmark mode: the drafts become the target's own tokens, a drawn number right
        pending = [i for i in pending if i not in free]
        target = argmax(logits)
        tokens = target.tolist()
        fakes = [synthetic_drafts(tokens[s:s + len(d) + 1], synthetic.propose_synthetic(len(d), slot_id), len(d),
                                  logits.shape[-1])
                 for d, s, slot_id in ((drafts[i], window_starts[i], windows[i][0].slot_id) for i in free)]
        for i, verdict in zip(free, verify_greedy(target, fakes, [window_starts[i] for i in free])):
            verdicts[i] = verdict
    is_greedy = {i: sampler.params[windows[i][0].slot_id].is_greedy for i in pending}
    greedy = [i for i in pending if is_greedy[i]]
    sampled = [i for i in pending if not is_greedy[i]]
    if greedy:
        for i, verdict in zip(greedy, verify_greedy(argmax(logits), [drafts[i] for i in greedy],
                                                    [window_starts[i] for i in greedy])):
            verdicts[i] = verdict
    if sampled:
        rows = [window_starts[i] + j for i in sampled for j in range(len(drafts[i]) + 1)]
        row_slot_ids = [windows[i][0].slot_id for i in sampled for _ in range(len(drafts[i]) + 1)]
        probs = torch.zeros_like(logits)
        probs[rows] = sampler.window_probs(logits[rows], row_slot_ids)
        seeded = [i for i in sampled if sampler.params[windows[i][0].slot_id].seed is not None]
        unseeded = [i for i in sampled if i not in seeded]
        if seeded:
            verdicts.update(zip(seeded, _verify_seeded(sampler, probs, windows, window_starts, drafts, seeded)))
        if unseeded:
            verdicts.update(zip(unseeded, verify_rejection(probs, [drafts[i] for i in unseeded],
                                                           [window_starts[i] for i in unseeded],
                                                           shared_generator=sampler.shared_generator)))
    return [verdicts[i] for i in range(len(windows))]


def _verify_seeded(sampler: Sampler, probs: torch.Tensor, windows, window_starts: list[int],
                   drafts: list[list[int]], seeded: list[int]) -> list[tuple[list[int], int]]:
    """Seeded sampled windows: each row's token drawn as plain decoding draws it at that output position (the
    request's seed and the position), drafts accepted while they equal those tokens. The emitted tokens are plain
    decoding's whatever the drafts, so follow the target distribution; a deterministic draft d is accepted with
    probability p(d), as speculative sampling accepts it (our drafters' drafts are argmaxes: one-hot q)."""
    rows = [window_starts[i] + j for i in seeded for j in range(len(drafts[i]) + 1)]
    row_slot_ids = [windows[i][0].slot_id for i in seeded for _ in range(len(drafts[i]) + 1)]
    offsets = [j for i in seeded for j in range(len(drafts[i]) + 1)]
    at = index_tensor(rows, probs.device)
    targets = torch.zeros(probs.shape[0], dtype=torch.int64, device=probs.device)                   # [R]
    targets[at] = sampler.sample_seeded_positions(probs[at], row_slot_ids, offsets)
    return verify_greedy(targets, [drafts[i] for i in seeded], [window_starts[i] for i in seeded])
