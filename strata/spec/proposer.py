"""The drafter: proposes the next step's drafts for every sampling slot, after verification.

- suffix: prompt-lookup matches over the slot's committed tokens (no model);
- mtp: the model's MTP head. Pass 1 runs over every row of the step (prompt chunks included) so the
  head's one-layer KV stays complete: row p gets (embedding of token p + 1, target hidden of row p);
  the row of a slot's last accepted position yields draft 1. Passes 2..k run one token per slot at
  the following positions, batched across slots, recursing on the head's own hidden state;
- mtp+suffix: both, keeping the longer credible proposal per slot;
- synthetic: placeholders, and `synthetic` (spec/synthetic.py) decides at verification how many of
  them the target accepts (benchmarks on random weights).
The drafter's probability floor cuts a proposal at the first draft the drafter itself doubts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from strata.config import SpecConfig
from strata.spec.suffix import SuffixDrafter
from strata.spec.synthetic import SyntheticDrafter
from strata.spec.verify_step import SlotOutcome
from strata.transfer import index_tensor
from strata.types import ScheduledSlot

# (one-token slots of an MTP pass, block tables) -> the pass's ForwardContext (the runner's input builder)
ContextBuilder = Callable[[list[ScheduledSlot], dict[int, list[int]]], object]


class Proposer:
    def __init__(self, spec: SpecConfig, model, build_context: ContextBuilder, seed: int = 0) -> None:
        self.spec = spec
        self.model = model
        self.build_context = build_context
        self.suffix = SuffixDrafter(spec.suffix_max_ngram) if spec.method in ("suffix", "mtp+suffix") else None
        self.synthetic = SyntheticDrafter(spec.acceptance_length, seed) if spec.method == "synthetic" else None
        self.tokens: dict[int, list[int]] = {}   # committed tokens per slot (the MTP needs prompt lookahead)

    def add_slot(self, slot_id: int, token_ids: list[int]) -> None:
        self.tokens[slot_id] = list(token_ids)
        if self.suffix is not None:
            self.suffix.add_slot(slot_id, token_ids)
        if self.synthetic is not None:
            self.synthetic.add_slot(slot_id)

    def remove_slot(self, slot_id: int) -> None:
        self.tokens.pop(slot_id, None)
        if self.suffix is not None:
            self.suffix.remove_slot(slot_id)
        if self.synthetic is not None:
            self.synthetic.remove_slot(slot_id)

    def commit(self, slot_id: int, token_ids: list[int]) -> None:
        self.tokens[slot_id].extend(token_ids)
        if self.suffix is not None:
            self.suffix.extend(slot_id, token_ids)

    @torch.inference_mode()
    def propose(self, scheduled: list[ScheduledSlot], query_starts: list[int], input_ids: torch.Tensor,
                hidden: torch.Tensor, ctx, outcomes: list[SlotOutcome],
                block_tables: dict[int, list[int]]) -> dict[int, list[int]]:
        """-> slot id -> drafts (at most the slot's `next_k`) for the slots that want them."""
        wanted = _wanted(scheduled)
        mtp: dict[int, list[int]] = {}
        if self.needs_mtp_forward(scheduled):
            mtp = self._propose_mtp(scheduled, query_starts, input_ids, hidden, ctx, outcomes, wanted, block_tables)
        drafts = {}
        for slot_id, k in wanted.items():
            if self.spec.method == "synthetic":
                drafts[slot_id] = [self.tokens[slot_id][-1]] * k
                continue
            proposal = mtp.get(slot_id, [])
            if self.suffix is not None:
                matched = self.suffix.propose(slot_id, k)
                if len(matched) > len(proposal):
                    proposal = matched
            drafts[slot_id] = proposal
        return drafts

    def needs_mtp_forward(self, scheduled: list[ScheduledSlot]) -> bool:
        """Whether `propose` will run the MTP layer after this step (known before its forward)."""
        return self.spec.uses_mtp and _needs_mtp_forward(scheduled, _wanted(scheduled))

    def _propose_mtp(self, scheduled, query_starts, input_ids, hidden, ctx, outcomes, wanted,
                     block_tables) -> dict[int, list[int]]:
        by_slot = {o.slot_id: o for o in outcomes}
        shifted = torch.roll(input_ids, -1)  # row p -> token p + 1 inside each window
        for work, start in zip(scheduled, query_starts):
            end = start + work.num_new_tokens
            outcome = by_slot.get(work.slot_id)
            if outcome is not None:
                shifted[outcome.last_row] = outcome.token_ids[-1]
            else:  # a prompt chunk: the next token is the next prompt token
                shifted[end - 1] = self.tokens[work.slot_id][work.num_computed_tokens + work.num_new_tokens]
        draft_hidden = self.model.mtp_forward(shifted, hidden, ctx)  # [T, D] (or the model's wide hidden)
        slots = [o for o in outcomes if o.slot_id in wanted]
        if not slots:
            return {}
        rows = index_tensor([o.last_row for o in slots], hidden.device)
        state = draft_hidden[rows]                                   # [S, D]
        # absolute position of each slot's last accepted token
        window_start = {w.slot_id: (w.num_computed_tokens, start) for w, start in zip(scheduled, query_starts)}
        positions = {o.slot_id: window_start[o.slot_id][0] + o.last_row - window_start[o.slot_id][1] for o in slots}
        if self.spec.draft_prob_floor == 0:
            return self._draft_on_device(slots, wanted, positions, state, block_tables)
        drafts = {o.slot_id: [] for o in slots}
        active = list(slots)
        for step in range(max(wanted[o.slot_id] for o in slots)):
            if step > 0:
                newest = index_tensor([drafts[o.slot_id][-1] for o in active], state.device)     # [S]
                state = self._mtp_step(active, newest, positions, state, step, block_tables)
            probs = torch.softmax(self.model.draft_logits(state), dim=-1)
            best_prob, best = probs.max(dim=-1)
            keep = []
            for i, (o, token, prob) in enumerate(zip(active, best.tolist(), best_prob.tolist())):
                if prob < self.spec.draft_prob_floor:
                    continue
                drafts[o.slot_id].append(token)
                if len(drafts[o.slot_id]) < wanted[o.slot_id]:
                    keep.append(i)
            active = [active[i] for i in keep]
            state = state[keep]
            if not active:
                break
        return drafts

    def _draft_on_device(self, slots, wanted, positions, state, block_tables):
        """Without a probability floor every draft is kept, so the passes need nothing from the host:
        each feeds the previous pass's most likely tokens [S] as its input ids on the device, and the
        drafts are read back once at the end (a read per pass would make the host wait for the device
        between passes). Every slot runs the longest k; each keeps its own first `wanted` drafts."""
        tokens = [torch.softmax(self.model.draft_logits(state), dim=-1).argmax(dim=-1)]      # [S]
        for step in range(1, max(wanted[o.slot_id] for o in slots)):
            state = self._mtp_step(slots, tokens[-1], positions, state, step, block_tables)
            tokens.append(torch.softmax(self.model.draft_logits(state), dim=-1).argmax(dim=-1))
        rows = torch.stack(tokens, dim=1).tolist()                                            # [S, k]
        return {o.slot_id: row[:wanted[o.slot_id]] for o, row in zip(slots, rows)}

    def _mtp_step(self, active, input_ids, positions, state, step, block_tables):
        """One recursive MTP pass: each active slot feeds its newest draft (input_ids [S], on the device)
        at the next position -> the pass's hidden states [S, D]."""
        work = [ScheduledSlot(o.slot_id, positions[o.slot_id] + step, 1, [], [0]) for o in active]
        return self.model.mtp_forward(input_ids, state, self.build_context(work, block_tables))



def _wanted(scheduled: list[ScheduledSlot]) -> dict[int, int]:
    """Slot id -> drafts wanted for the next step, for the slots that sample and want some."""
    return {w.slot_id: w.next_k for w in scheduled if w.sample and w.next_k > 0}


def _needs_mtp_forward(scheduled: list[ScheduledSlot], wanted: dict[int, int]) -> bool:
    """The MTP layer runs (and writes its KV) while some slot wants drafts, and on prompt chunks of
    requests the draft policy gives drafts. Other steps skip it: it is an eager layer (about 2.4 ms per
    decode step at one stream on the H200, against a 5 ms step of qwen3-next-80b at 24 layers, and more
    on a batch of prompts). Those positions' MTP KV stays unwritten, which can only lower the
    acceptance of drafts proposed later, never change the output (verification decides)."""
    return bool(wanted) or any(w.num_new_tokens > 1 + len(w.draft_token_ids) and w.drafting for w in scheduled)
