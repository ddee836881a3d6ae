"""The device expert cache (mechanism only; placement.py decides): fixed slots holding the resident
experts' weights, a device remap table (layer, expert) -> slot read by the forward, and every expert's
weights in host memory (pinned on CUDA, so copies are asynchronous DMA).

Residency changes never change a shape or a pointer, so a captured graph stays valid. A swap evicts
at once (the remap entry goes to -1) but loads in the background: on CUDA the copy runs on a side
stream and the new remap entry is published by `apply_ready` only after the copy has finished, so the
forward never waits for it and never reads a half-copied slot.
"""

from __future__ import annotations

import torch

from strata.experts.placement import Expert


class ExpertSlots:
    def __init__(self, host_w13: list[torch.Tensor], host_w2: list[torch.Tensor], num_slots: int,
                 num_staging: int, device: str | torch.device) -> None:
        self.host_w13, self.host_w2 = host_w13, host_w2  # per layer [E, 2I, D], [E, D, I] in host memory
        num_layers = len(host_w13)
        self.num_experts, two_i, dim = host_w13[0].shape
        dtype = host_w13[0].dtype
        self.num_slots, self.num_staging = num_slots, num_staging
        total = num_slots + num_staging  # hot-set slots, then PCIe staging slots
        self.w13_slots = torch.zeros(total, two_i, dim, dtype=dtype, device=device)       # [N + S, 2I, D]
        self.w2_slots = torch.zeros(total, dim, two_i // 2, dtype=dtype, device=device)   # [N + S, D, I]
        self.remap = torch.full((num_layers, self.num_experts), -1, dtype=torch.long, device=device)  # [L, E]
        self.slot_of: dict[Expert, int] = {}      # host view: resident and loading experts
        self.free_slots = list(range(num_slots))
        self.visible_per_layer = [0] * num_layers  # experts whose remap entry is published
        self.pending: list[tuple[torch.cuda.Event | None, list[Expert], list[int]]] = []
        self.side_stream = torch.cuda.Stream(device) if torch.device(device).type == "cuda" else None
        self.expert_bytes = (host_w13[0][0].numel() + host_w2[0][0].numel()) * host_w13[0].element_size()

    # ---- host views -------------------------------------------------------------------------------

    def is_layer_resident(self, layer: int) -> bool:
        return self.visible_per_layer[layer] == self.num_experts

    def resident_mask(self) -> torch.Tensor:
        """[L, E] bool on the host: experts holding a slot (published or still loading)."""
        mask = torch.zeros(len(self.host_w13), self.num_experts, dtype=torch.bool)
        for layer, expert in self.slot_of:
            mask[layer, expert] = True
        return mask

    # ---- changes ----------------------------------------------------------------------------------

    def load(self, experts: list[Expert]) -> int:
        """Give free slots to `experts` (copied in the background); returns the bytes copied."""
        if len(experts) > len(self.free_slots):
            raise ValueError(f"{len(experts)} experts to load but only {len(self.free_slots)} free slots")
        slots = [self.free_slots.pop() for _ in experts]
        for expert, slot in zip(experts, slots):
            self.slot_of[expert] = slot
        event = None
        if self.side_stream is not None:
            self.side_stream.wait_stream(torch.cuda.current_stream())  # an evicted slot may still be read
            with torch.cuda.stream(self.side_stream):
                self._copy(experts, slots)
            event = torch.cuda.Event()
            event.record(self.side_stream)
        else:
            self._copy(experts, slots)
        self.pending.append((event, experts, slots))
        self.apply_ready()
        return len(experts) * self.expert_bytes

    def fill(self, experts: list[Expert]) -> None:
        """The initial hot set, published before the first step."""
        self.load(experts)
        if self.side_stream is not None:
            self.side_stream.synchronize()
        self.apply_ready()

    def evict(self, experts: list[Expert]) -> None:
        """Unpublish `experts` now (ordered after work already queued) and free their slots."""
        if not experts:
            return
        layers, ids = zip(*experts)
        self.remap[list(layers), list(ids)] = -1
        for expert in experts:
            slot = self.slot_of.pop(expert)
            self.free_slots.append(slot)
            self.visible_per_layer[expert[0]] -= 1

    def swap(self, swaps: list[tuple[Expert, Expert]]) -> int:
        """(evict, load) pairs -> bytes copied."""
        self.apply_ready()  # an expert still loading cannot be evicted cleanly
        swaps = [(out, into) for out, into in swaps if not self._is_pending(out)]
        self.evict([out for out, _ in swaps])
        return self.load([into for _, into in swaps])

    def apply_ready(self) -> None:
        """Publish the remap entries of loads whose copies have finished."""
        still = []
        for event, experts, slots in self.pending:
            if event is not None and not event.query():
                still.append((event, experts, slots))
                continue
            layers, ids = zip(*experts) if experts else ((), ())
            if experts:
                self.remap[list(layers), list(ids)] = torch.tensor(slots, dtype=torch.long).to(self.remap.device)
            for layer in layers:
                self.visible_per_layer[layer] += 1
        self.pending = still

    def stage(self, layer: int, experts: list[int]) -> list[int]:
        """Copy up to num_staging experts of `layer` into the staging slots on the current stream
        (the forward needs them now); returns their staging slots."""
        slots = list(range(self.num_slots, self.num_slots + len(experts)))
        self._copy([(layer, e) for e in experts], slots)
        return slots

    def _copy(self, experts: list[Expert], slots: list[int]) -> None:
        for (layer, expert), slot in zip(experts, slots):
            self.w13_slots[slot].copy_(self.host_w13[layer][expert], non_blocking=True)
            self.w2_slots[slot].copy_(self.host_w2[layer][expert], non_blocking=True)

    def _is_pending(self, expert: Expert) -> bool:
        return any(expert in experts for _, experts, _ in self.pending)
