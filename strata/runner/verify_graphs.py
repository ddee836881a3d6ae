"""The device work around a verification step planned ahead, as CUDA graphs of the step's layout.

Before the forward, the windows move back by the shortfall of the step before (GraphInputs.shift); after the LM
head come the verdicts (the target's tokens, the drafts accepted, the bonus token), every recurrent state rolled back
to its slot's last accepted token and the outputs packed for one copy to the host. Eagerly that is about forty small
launches a step, whose host time a one-stream step does not hide (session 35, host profile at one stream: ~0.4 ms
of a 1.4 ms step); replayed, it is two graph launches and the copies of their inputs.

A layout's shift graph is captured at its first shifted step and then replayed (only torch ops: nothing to
compile). Its verdict graph is captured right after the layout's first such step ran the same ops eagerly (so
every kernel is compiled, and that step's results are the eager ones). Both read and write only persistent
buffers (the graph inputs, the shared LM head logits, the layout's recorded window states, the state caches) and
are released with the layout's forward graph (CudaGraphCache). Padding slots run along: their windows move by 0 and
their states roll back into the scratch row no request owns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from strata.spec.verify_ahead import greedy_verdicts, roll_back_states, synthetic_verdicts


@dataclass
class Verdicts:
    """A verification step's verdicts on the device, over its S graph slots (real ones first)."""

    tokens: torch.Tensor    # [S, n] the target's token at every window row
    accepted: torch.Tensor  # [S] int64 drafts accepted
    bonus: torch.Tensor     # [S] the token after them
    packed: torch.Tensor    # [S, n + 1] tokens, then accepted: one copy to the host

    def real(self, num_slots: int) -> Verdicts:
        return Verdicts(self.tokens[:num_slots], self.accepted[:num_slots], self.bonus[:num_slots],
                        self.packed[:num_slots])


def verdicts(logits: torch.Tensor, input_ids: torch.Tensor, num_slots: int, window: int,
             accepted_in: torch.Tensor | None) -> Verdicts:
    """logits [S * n, V] and input ids [S * n] of S windows of n rows -> their verdicts. `accepted_in` [S]: the
    accepted counts synthetic drafting drew, else greedy verdicts (spec/verify_ahead.py has both)."""
    if accepted_in is not None:
        accepted = accepted_in + 0                                         # [S] (a copy: the input is reused)
        tokens, bonus = synthetic_verdicts(logits, num_slots, window, accepted)
    else:
        drafts = input_ids.view(num_slots, window)[:, 1:]                  # [S, k]
        tokens, accepted, bonus = greedy_verdicts(logits, num_slots, window, drafts)
    return Verdicts(tokens, accepted, bonus, torch.cat((tokens, accepted.unsqueeze(1)), dim=1))


@dataclass
class _Tail:
    graph: torch.cuda.CUDAGraph
    verdicts: Verdicts


class VerifyGraphs:
    """Shift and verdict graphs per layout (their CUDA graphs live in the layout's CapturedStep), the buffers they
    read, and a ring of pinned host buffers the packed verdicts are copied into."""

    READBACK_TURNS = 4  # > steps in flight at once (one read, one queued behind it)

    def __init__(self, inputs, state_caches: dict, max_slots: int, max_tokens_per_slot: int, device,
                 capture: Callable[[Callable[[], object], str], torch.cuda.CUDAGraph | None]) -> None:
        self.inputs, self.state_caches = inputs, state_caches
        self.capture = capture  # fn's launches as a graph in the forward graphs' pool, None if that failed
        self.delta = torch.zeros(max_slots, dtype=torch.long, device=device)        # [S] windows' moves
        self.accepted_in = torch.zeros(max_slots, dtype=torch.long, device=device)  # [S] synthetic accepted counts
        self._readback_size = max_slots * (max_tokens_per_slot + 1)
        self._readback: list[torch.Tensor] = []  # made at the first read (pinned: CUDA only)
        self._turn = 0
        self.num_replays = 0

    def shift(self, captured, num_slots: int, window: int, delta: torch.Tensor) -> None:
        """Move the first len(delta) slots' windows of a filled layout by delta [R] (the rest, padding, by 0)."""
        real = delta.shape[0]
        self.delta[:real].copy_(delta)
        if real < num_slots:
            self.delta[real:num_slots].zero_()

        def run() -> None:
            self.inputs.shift(self.delta[:num_slots], num_slots, window)

        if captured.shift_graph is None and "shift" not in captured.verify_eager:
            captured.shift_graph = self.capture(run, f"the window shift of layout {(num_slots, window)}")
            if captured.shift_graph is None:
                captured.verify_eager.add("shift")
        if captured.shift_graph is None:
            run()
            return
        captured.shift_graph.replay()
        self.num_replays += 1

    def verdicts(self, captured, key: tuple, head_logits: torch.Tensor, accepted_in: list[int] | None) -> Verdicts:
        """After the layout's LM head replayed into head_logits: the verdicts of its S slots, states rolled back.
        `accepted_in`: the real slots' synthetic accepted counts (None: greedy verdicts)."""
        num_slots, window = key[:2]
        if accepted_in is not None:
            self.accepted_in[:len(accepted_in)].copy_(torch.tensor(accepted_in, dtype=torch.long).pin_memory(),
                                                      non_blocking=True)
            if len(accepted_in) < num_slots:
                self.accepted_in[len(accepted_in):num_slots].zero_()
        mode = "synthetic" if accepted_in is not None else "greedy"

        def run() -> Verdicts:
            rows = num_slots * window
            out = verdicts(head_logits[:rows], self.inputs.device_buffer("input_ids")[:rows], num_slots, window,
                           self.accepted_in[:num_slots] if accepted_in is not None else None)
            if captured.window_states:
                slots = self.inputs.device_buffer("state_slot_ids")[:num_slots]
                roll_back_states(self.state_caches, captured.window_states, slots, window, out.accepted)
            return out

        tail = captured.verify_tails.get(mode)
        if tail is None:
            out = run()  # this step's own results; then the same ops recorded for the next
            if mode not in captured.verify_eager:
                holder = {}
                graph = self.capture(lambda: holder.setdefault("out", run()), f"the verdicts of layout {key}, {mode}")
                if graph is None:
                    captured.verify_eager.add(mode)
                else:
                    captured.verify_tails[mode] = _Tail(graph, holder["out"])
            return out
        tail.graph.replay()
        self.num_replays += 1
        return tail.verdicts

    def to_host(self, packed: torch.Tensor) -> torch.Tensor:
        """packed [R, n + 1] copied into the next pinned buffer of the ring, queued on the stream."""
        if not self._readback:
            self._readback = [torch.empty(self._readback_size, dtype=torch.long, pin_memory=True)
                              for _ in range(self.READBACK_TURNS)]
        self._turn = (self._turn + 1) % len(self._readback)
        host = self._readback[self._turn][:packed.numel()].view(packed.shape)
        host.copy_(packed, non_blocking=True)
        return host
