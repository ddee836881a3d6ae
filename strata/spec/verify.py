"""Draft verification: how many of each slot's drafts the target accepts, and the token after them.

Pure functions over one step's rows, batched over slots with ragged drafts. Slot i owns rows
row_starts[i] .. row_starts[i] + k_i; row j predicts the token after window position j (position 0
is the slot's last committed token, 1..k_i its drafts), so draft j is checked against row j and the
slot's last row yields the bonus when every draft is accepted. One device -> host copy per call.
"""

from __future__ import annotations

import torch

from strata.sample.probs import sample_from_probs
from strata.transfer import index_tensor

SlotVerdict = tuple[list[int], int]   # (accepted drafts followed by the bonus token, num_accepted)


def verify_greedy(target_argmax: torch.Tensor, draft_token_ids: list[list[int]],
                  row_starts: list[int]) -> list[SlotVerdict]:
    """target_argmax [R] int -> per slot the longest draft prefix equal to the target's argmax, then
    the argmax at the first mismatch (or at the last row). Accepted drafts equal the argmax, so the
    emitted tokens are exactly argmax[start : start + num_accepted + 1]."""
    _check_layout(target_argmax.shape[0], draft_token_ids, row_starts)
    argmax = target_argmax.tolist()
    verdicts = []
    for drafts, start in zip(draft_token_ids, row_starts):
        num_accepted = 0
        while num_accepted < len(drafts) and drafts[num_accepted] == argmax[start + num_accepted]:
            num_accepted += 1
        verdicts.append((argmax[start:start + num_accepted + 1], num_accepted))
    return verdicts


def verify_rejection(target_probs: torch.Tensor, draft_token_ids: list[list[int]], row_starts: list[int],
                     draft_probs: torch.Tensor | None = None,
                     generators: list[torch.Generator | None] | None = None,
                     shared_generator: torch.Generator | None = None) -> list[SlotVerdict]:
    """Speculative sampling: emitted tokens follow target_probs exactly, whatever the drafts.

    target_probs [R, V]: the processed distribution of each row (`processed_probs`). draft_probs
    [R, V]: draft_probs[row_starts[i] + j] is the q that draft j was drawn from (the slot's last
    row is ignored); None means a deterministic drafter (one-hot q). Draft j is accepted with
    probability min(1, p(d)/q(d)); at the first rejection the token is drawn from max(p - q, 0)
    (for one-hot q: p with d zeroed), and after k_i acceptances the bonus is drawn from p at the
    last row. A one-hot p (a greedy row) gives exactly verify_greedy's answer.

    generators[i] (None: use shared_generator) serves slot i: k_i uniforms, then V exponentials
    for the final token, in that order, so a seeded slot's verdict does not depend on its batch.
    The caller seeds it (e.g. position_seed(seed, num_output_tokens), as the Sampler does).
    """
    num_slots = len(draft_token_ids)
    _check_layout(target_probs.shape[0], draft_token_ids, row_starts)
    if draft_probs is not None and draft_probs.shape != target_probs.shape:
        raise ValueError(f"draft_probs has shape {tuple(draft_probs.shape)}; expected "
                         f"{tuple(target_probs.shape)}, the shape of target_probs")
    if num_slots == 0:
        return []
    generators = generators if generators is not None else [None] * num_slots
    if len(generators) != num_slots:
        raise ValueError(f"got {len(generators)} generators for {num_slots} slots; pass one per slot "
                         "(None for the shared generator)")
    num_accepted = _num_accepted(target_probs, draft_token_ids, row_starts, draft_probs,
                                 generators, shared_generator)                          # [S]
    final_probs = _final_probs(target_probs, draft_token_ids, row_starts, draft_probs,
                               num_accepted)                                            # [S, V]
    final_tokens = sample_from_probs(final_probs, {i: g for i, g in enumerate(generators) if g is not None},
                                     shared_generator)                                  # [S]
    num_accepted_list, final_token_list = torch.stack([num_accepted, final_tokens]).tolist()
    return [(drafts[:n] + [token], n)
            for drafts, n, token in zip(draft_token_ids, num_accepted_list, final_token_list)]


def _num_accepted(target_probs: torch.Tensor, draft_token_ids: list[list[int]], row_starts: list[int],
                  draft_probs: torch.Tensor | None, generators: list[torch.Generator | None],
                  shared_generator: torch.Generator | None) -> torch.Tensor:
    """[S] int64 on the device: each slot's count of leading accepted drafts."""
    device = target_probs.device
    num_drafts = [len(drafts) for drafts in draft_token_ids]
    max_k = max(num_drafts)
    if max_k == 0:
        return torch.zeros(len(num_drafts), dtype=torch.int64, device=device)
    slot_index = [i for i, k in enumerate(num_drafts) for _ in range(k)]
    draft_index = [j for k in num_drafts for j in range(k)]
    rows = index_tensor([row_starts[i] + j for i, j in zip(slot_index, draft_index)], device)
    ids = index_tensor([token for drafts in draft_token_ids for token in drafts], device)
    p_draft = target_probs[rows, ids]                                                    # [D]
    q_draft = draft_probs[rows, ids] if draft_probs is not None else torch.ones_like(p_draft)
    # u in [0, 1): u * q < p has probability min(1, p / q), and is exact for p = 1 and p = 0.
    accept = _uniforms(num_drafts, generators, shared_generator, device) * q_draft < p_draft  # [D]
    accept_padded = torch.zeros(len(num_drafts), max_k, dtype=torch.int64, device=device)  # [S, max_k]
    accept_padded[index_tensor(slot_index, device), index_tensor(draft_index, device)] = \
        accept.long()
    return accept_padded.cumprod(dim=1).sum(dim=1)


def _uniforms(num_drafts: list[int], generators: list[torch.Generator | None],
              shared_generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """[D] uniforms in [0, 1), slot-major: a seeded slot's come from its own generator, the rest
    from one batched draw of the shared generator."""
    offsets = [0]
    for k in num_drafts:
        offsets.append(offsets[-1] + k)
    uniforms = torch.empty(offsets[-1], device=device)
    shared = [d for i, g in enumerate(generators) if g is None for d in range(offsets[i], offsets[i + 1])]
    if shared:
        uniforms[shared] = torch.rand(len(shared), generator=shared_generator, device=device)
    for i, generator in enumerate(generators):
        if generator is not None and num_drafts[i] > 0:
            uniforms[offsets[i]:offsets[i + 1]] = torch.rand(num_drafts[i], generator=generator, device=device)
    return uniforms


def _final_probs(target_probs: torch.Tensor, draft_token_ids: list[list[int]], row_starts: list[int],
                 draft_probs: torch.Tensor | None, num_accepted: torch.Tensor) -> torch.Tensor:
    """[S, V] weights of each slot's final token: the residual max(p - q, 0) at the first rejected
    draft, else p at the last row. Unnormalised: the exponential race in sample_from_probs draws
    in proportion to the weights, so no division (and no 0 / 0) is needed."""
    device = target_probs.device
    num_drafts = [len(drafts) for drafts in draft_token_ids]
    final_rows = index_tensor(row_starts, device) + num_accepted                         # [S]
    p_final = target_probs[final_rows]                                                   # [S, V]
    max_k = max(num_drafts)
    if max_k == 0:
        return p_final
    rejected = num_accepted < index_tensor(num_drafts, device)                           # [S]
    if draft_probs is not None:
        residual = (p_final - draft_probs[final_rows]).clamp_min(0.0)
    else:
        padded = index_tensor([drafts + [0] * (max_k - len(drafts)) for drafts in draft_token_ids],
                              device)                                                    # [S, max_k]
        rejected_ids = padded.gather(1, num_accepted.clamp(max=max_k - 1).unsqueeze(1))  # [S, 1]
        residual = p_final.scatter(1, rejected_ids, 0.0)
    # Zero residual mass happens only by rounding (p(d) a hair under 1 with nothing else left); p is
    # then the right answer, where an all-zero row would silently draw token 0.
    use_residual = rejected & (residual.sum(dim=1) > 0)                                  # [S]
    return torch.where(use_residual.unsqueeze(1), residual, p_final)


def _check_layout(num_rows: int, draft_token_ids: list[list[int]], row_starts: list[int]) -> None:
    if len(draft_token_ids) != len(row_starts):
        raise ValueError(f"got {len(draft_token_ids)} draft lists for {len(row_starts)} row starts; "
                         "pass one of each per slot")
    for slot, (drafts, start) in enumerate(zip(draft_token_ids, row_starts)):
        if start < 0 or start + len(drafts) >= num_rows:
            raise ValueError(f"slot {slot} needs rows {start}..{start + len(drafts)} but the target "
                             f"has {num_rows} rows")
