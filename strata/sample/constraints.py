"""Per-request constraints on the logits: `logit_bias` and a grammar's token mask (structured output).

Both are applied on the logits' device right before sampling or verification, in plain torch. A grammar's
masks are computed on the CPU by llguidance (its threads, GIL released) while the forward that produces
the logits still runs on the device: `prepare` fills them before anything waits for the device and
starts their copy, `apply` finds them there (or fills them itself). A mask is a bitmask [R, ceil(V / 32)]
int32, expanded on the device. For a verification window the matcher walks the
drafts to fill one mask per row (a draft the grammar refuses ends the walk: the rows after it are never
used, since that draft is rejected) and rolls itself back; commit then advances it by the accepted tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import llguidance
import torch

from strata.transfer import index_tensor
from strata.types import SamplingParams, StructuredOutputs

# (slot_id, first row, draft token ids): the slot owns rows first .. first + len(drafts) of the logits
Window = tuple[int, int, list[int]]


def _bits(bitmask: torch.Tensor, set_: bool) -> torch.Tensor:
    """bitmask [R, W] int32 -> [R, 32 W] bool: where the bits are set (or clear). Read as bytes (little
    endian: byte 4 w + j holds tokens 32 w + 8 j ..), which is lighter than shifting int32 words."""
    as_bytes = bitmask.view(torch.uint8)                              # [R, 4 W]
    bit_values = torch.ones(8, dtype=torch.uint8, device=bitmask.device) << torch.arange(
        8, dtype=torch.uint8, device=bitmask.device)                  # made on the device: no host copy
    masked = as_bytes.unsqueeze(-1) & bit_values                      # [R, 4 W, 8]
    return (masked != 0 if set_ else masked == 0).reshape(bitmask.shape[0], -1)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bitmask [R, W] int32 (bit i of word w: token 32 w + i is allowed) -> allowed [R, V] bool."""
    return _bits(bitmask, True)[:, :vocab_size]


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [R, V], bitmask [R, W] on the logits' device -> logits with disallowed tokens at -inf."""
    return logits.masked_fill(_bits(bitmask, False)[:, :logits.shape[-1]], float("-inf"))


def allow_all_where_empty(bitmask: torch.Tensor) -> None:
    """Host bitmask [R, W]: a row that allows nothing (only a broken grammar gets there) allows everything
    instead, rather than turning into NaN probabilities. Checked on the host: W is V / 32 words."""
    bitmask[(bitmask == 0).all(dim=1)] = -1


class Constraints:
    """Each slot's logit bias (host lists) and grammar matcher. `new_matcher` builds a matcher from a
    request's StructuredOutputs; the engine sets it (it needs the tokenizer), and without it a
    structured request is refused."""

    def __init__(self, max_num_seqs: int, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.bias: list[tuple[list[int], list[float]] | None] = [None] * max_num_seqs
        self.matchers: list[llguidance.LLMatcher | None] = [None] * max_num_seqs
        self.new_matcher: Callable[[StructuredOutputs], llguidance.LLMatcher] | None = None
        self._executor: llguidance.LLExecutor | None = None
        # slot -> (the drafts its masks walked, bitmask [1 + k, W] on the device): filled by prepare, taken by
        # apply, dropped when the matcher moves
        self._prepared: dict[int, tuple[list[int], torch.Tensor]] = {}

    def add_slot(self, slot_id: int, params: SamplingParams, output_token_ids: list[int]) -> None:
        bias = params.logit_bias or {}
        self.bias[slot_id] = (list(bias), [float(v) for v in bias.values()]) if bias else None
        self.matchers[slot_id] = None
        self._prepared.pop(slot_id, None)
        if params.structured_outputs is None:
            return
        if self.new_matcher is None:
            raise ValueError("structured output needs the model's tokenizer, and this engine has none")
        matcher = self.new_matcher(params.structured_outputs)
        if output_token_ids:  # a preempted request resumes where its output stopped
            matcher.consume_tokens(output_token_ids)
        self.matchers[slot_id] = matcher

    def remove_slot(self, slot_id: int) -> None:
        self.bias[slot_id] = None
        self.matchers[slot_id] = None
        self._prepared.pop(slot_id, None)

    def has_grammar(self, slot_id: int) -> bool:
        return self.matchers[slot_id] is not None

    def advance(self, slot_id: int, token_ids: list[int]) -> None:
        """Committed tokens move the slot's matcher on (a refused one leaves it stopped: EOS only)."""
        matcher = self.matchers[slot_id]
        if matcher is not None and token_ids:
            matcher.consume_tokens(token_ids)
            self._prepared.pop(slot_id, None)

    def prepare(self, windows: list[Window], device: torch.device) -> None:
        """Fill the grammar masks of these windows now and start their copy to `device`: called before
        anything waits for the device, so the CPU's work overlaps the forward. Row numbers are ignored."""
        masked = [w for w in windows if self.matchers[w[0]] is not None]
        if not masked:
            return
        bitmask = self._fill(masked, device)
        offset = 0
        for slot_id, _, drafts in masked:
            self._prepared[slot_id] = (list(drafts), bitmask[offset:offset + len(drafts) + 1])
            offset += len(drafts) + 1

    def apply(self, logits: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        """logits [R, V] -> the same rows biased and masked for the slots that ask for it (a new tensor,
        or the input itself when no slot does)."""
        biased = [w for w in windows if self.bias[w[0]] is not None]
        masked = [w for w in windows if self.matchers[w[0]] is not None]
        if biased:
            logits = self._add_bias(logits, biased)
        if masked:
            logits = self._mask(logits, masked)
        return logits

    def _add_bias(self, logits: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        rows, cols, values = [], [], []
        for slot_id, first, drafts in windows:
            ids, bias = self.bias[slot_id]
            for row in range(first, first + len(drafts) + 1):
                rows += [row] * len(ids)
                cols += ids
                values += bias
        index = (index_tensor(rows, logits.device), index_tensor(cols, logits.device))
        return logits.index_put(index, index_tensor(values, logits.device, logits.dtype), accumulate=True)

    def _mask(self, logits: torch.Tensor, windows: list[Window]) -> torch.Tensor:
        prepared = [self._prepared.pop(slot_id, None) for slot_id, _, _ in windows]
        if all(p is not None and p[0] == list(drafts) for p, (_, _, drafts) in zip(prepared, windows)):
            bitmask = torch.cat([p[1] for p in prepared]) if len(prepared) > 1 else prepared[0][1]
        else:
            bitmask = self._fill(windows, logits.device)
        rows = [row for _, first, drafts in windows for row in range(first, first + len(drafts) + 1)]
        if rows == list(range(logits.shape[0])):  # every row (a lone request's): no gather and scatter
            return apply_bitmask(logits, bitmask)
        rows_t = index_tensor(rows, logits.device)
        return logits.index_put((rows_t,), apply_bitmask(logits[rows_t], bitmask))

    def _fill(self, windows: list[Window], device: torch.device) -> torch.Tensor:
        """-> bitmask [R', W] on `device`: the masks of each window's 1 + k positions, window after window."""
        num_rows = sum(len(drafts) + 1 for _, _, drafts in windows)
        words = (self.vocab_size + 31) // 32
        # pinned, so the copy to the device does not wait; -1 (all allowed) stays in rows after a refused draft
        bitmask = torch.full((num_rows, words), -1, dtype=torch.int32, pin_memory=device.type == "cuda")
        plain, with_drafts, row = [], [], 0
        for slot_id, _, drafts in windows:
            if drafts:
                with_drafts.append((self.matchers[slot_id], row, list(drafts)))
            else:
                plain.append((self.matchers[slot_id], row))
            row += len(drafts) + 1
        if self._executor is None:
            self._executor = llguidance.LLExecutor()
        if plain:
            self._executor.unsafe_compute_mask_ptr(plain, bitmask.data_ptr(), words * 4, num_rows)
        if with_drafts:
            self._executor.unsafe_compute_mask_ptr_with_draft_token(with_drafts, bitmask.data_ptr(), words * 4,
                                                                    num_rows)
        allow_all_where_empty(bitmask)
        return bitmask.to(device, non_blocking=True)
