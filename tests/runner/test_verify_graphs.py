"""VerifyGraphs without a GPU: a shift or verdict part whose capture fails runs eagerly, with the same results as a
step that never tried, and is not captured again (session 35's capture failure once raised out of the step)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from strata.runner.verify_graphs import VerifyGraphs


class _Inputs:
    """The graph inputs a verification layout reads: input ids, and a record of the windows' shifts."""

    def __init__(self, input_ids: torch.Tensor) -> None:
        self.input_ids, self.shifts = input_ids, []

    def shift(self, delta: torch.Tensor, num_slots: int, window: int) -> None:
        self.shifts.append((delta.tolist(), num_slots, window))

    def device_buffer(self, name: str) -> torch.Tensor:
        assert name == "input_ids"
        return self.input_ids


def _failing_graphs(inputs: _Inputs, max_slots: int, window: int) -> tuple[VerifyGraphs, list[str]]:
    attempts = []

    def capture(fn, what):
        attempts.append(what)
        return None  # as CudaGraphCache.capture_graph does when a capture fails

    return VerifyGraphs(inputs, {}, max_slots, window, "cpu", capture), attempts


def _layout() -> SimpleNamespace:
    return SimpleNamespace(shift_graph=None, verify_tails={}, verify_eager=set(), window_states={})


def test_a_shift_whose_capture_failed_runs_eagerly_and_is_not_captured_again():
    inputs = _Inputs(torch.zeros(8, dtype=torch.long))
    graphs, attempts = _failing_graphs(inputs, 4, 2)
    captured = _layout()
    graphs.shift(captured, 4, 2, torch.tensor([-1, 0, -2]))
    graphs.shift(captured, 4, 2, torch.tensor([0, -1, 0]))
    assert inputs.shifts == [([-1, 0, -2, 0], 4, 2), ([0, -1, 0, 0], 4, 2)]  # the padding slot moves by 0
    assert len(attempts) == 1 and captured.verify_eager == {"shift"} and graphs.num_replays == 0


def test_greedy_verdicts_whose_capture_failed_are_the_eager_ones_every_step():
    torch.manual_seed(0)
    num_slots, window, vocab = 3, 3, 11
    logits = torch.randn(num_slots * window, vocab)
    target = logits.argmax(dim=1).view(num_slots, window)
    drafts = target[:, :-1].clone()
    drafts[1, 1] = (drafts[1, 1] + 1) % vocab    # slot 1 accepts 1 draft
    drafts[2, 0] = (drafts[2, 0] + 1) % vocab    # slot 2 accepts none
    input_ids = torch.cat((torch.zeros(num_slots, 1, dtype=torch.long), drafts), dim=1).flatten()
    graphs, attempts = _failing_graphs(_Inputs(input_ids), num_slots, window)
    captured = _layout()
    for _ in range(2):
        out = graphs.verdicts(captured, (num_slots, window), logits, None)
        assert out.accepted.tolist() == [2, 1, 0]
        assert out.tokens.tolist() == target.tolist()
        assert out.bonus.tolist() == [target[0, 2].item(), target[1, 1].item(), target[2, 0].item()]
        assert out.packed.tolist() == [row + [a] for row, a in zip(target.tolist(), [2, 1, 0])]
    assert len(attempts) == 1 and captured.verify_eager == {"greedy"} and not captured.verify_tails
