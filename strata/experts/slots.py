"""The device expert cache (mechanism only; placement.py decides): fixed slots holding the resident
experts' weights, a device remap table (layer, expert) -> slot read by the forward, and every expert's
weights in host memory (pinned on CUDA, so copies are asynchronous DMA, and the device's kernels can read
the zero-copy experts, `set_zero_copy`, in place).

A slot is bytes: room for one expert of the layer with the largest experts (dense 16-bit experts are all
alike; GGUF files mix block types across layers, Q4_K_M's Q6_K down projections on some). Each layer reads
the slots through views in its own dtype and shape (`layer_weights`): dense (w13 [N + S, 2I, D],
w2 [N + S, D, I]) or, with `qtypes`, ExpertBlocks of its block types. A swap copies an expert's bytes.

Residency changes never change a shape or a pointer, so a captured graph stays valid. A swap evicts
at once (the remap entry goes to -1) but loads in the background: on CUDA the copy runs on a side
stream and the new remap entry is published by `apply_ready` only after the copy has finished, so the
forward never waits for it and never reads a half-copied slot.
"""

from __future__ import annotations

import torch

from strata import dma
from strata.experts.placement import Expert
from strata.kernels.sm_copy import gather_rows
from strata.model.registry import ExpertBlocks
from strata.transfer import index_tensor


class ExpertSlots:
    def __init__(self, host_w13: list[torch.Tensor], host_w2: list[torch.Tensor], num_slots: int,
                 num_staging: int, device: str | torch.device, qtypes: list[tuple[int, int]] | None = None) -> None:
        """host_w13 / host_w2: per layer [E, 2I, D] / [E, D, I] dense, or uint8 [E, 2I, rb13] / [E, D, rb2] GGUF
        blocks of types qtypes[layer] = (w13's, w2's), in host memory."""
        self.host_w13, self.host_w2, self.qtypes = host_w13, host_w2, qtypes
        num_layers = len(host_w13)
        self.num_experts = host_w13[0].shape[0]
        self.num_slots, self.num_staging = num_slots, num_staging
        total = num_slots + num_staging  # hot-set slots, then PCIe staging slots
        self._bytes13 = [_expert_nbytes(w) for w in host_w13]  # per layer: one expert's w13 bytes
        self._bytes2 = [_expert_nbytes(w) for w in host_w2]
        self._slots13 = torch.zeros(total, max(self._bytes13), dtype=torch.uint8, device=device)  # [N + S, bytes]
        self._slots2 = torch.zeros(total, max(self._bytes2), dtype=torch.uint8, device=device)
        self._views = [(_slot_view(self._slots13, w), _slot_view(self._slots2, v)) for w, v in zip(host_w13, host_w2)]
        self.remap = torch.full((num_layers, self.num_experts), -1, dtype=torch.long, device=device)  # [L, E]
        self.slot_of: dict[Expert, int] = {}      # host view: resident and loading experts
        self.free_slots = list(range(num_slots))
        self.visible_per_layer = [0] * num_layers  # experts whose remap entry is published
        # experts the device reads in place from host memory (set_zero_copy): [L, E] their id, -1 for the others
        self.zero_copy_ids = torch.full((num_layers, self.num_experts), -1, dtype=torch.long, device=device)
        self.zero_copy_per_layer = [0] * num_layers
        self._sm_rows: tuple[torch.Tensor, torch.Tensor] | None = None  # stage_by_sm's rows, made at first use
        self._zero_copy_host = torch.full((num_layers, self.num_experts), -1, dtype=torch.long)  # [L, E]
        self.pending: list[tuple[torch.cuda.Event | None, list[Expert], list[int]]] = []
        self.side_stream = torch.cuda.Stream(device) if torch.device(device).type == "cuda" else None
        # raw copies (dma.py) by address: per layer the host experts' base addresses, the slots' rows
        raw = self.side_stream is not None and all(w.is_contiguous() for w in (*host_w13, *host_w2))
        self._dma = dma.runtime() if raw else None
        self._host_bases = [(w.data_ptr(), v.data_ptr()) for w, v in zip(host_w13, host_w2)]

    def layer_weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | ExpertBlocks:
        """The slots as layer `layer` reads them: (w13 [N + S, 2I, D], w2 [N + S, D, I]) dense, or ExpertBlocks."""
        w13, w2 = self._views[layer]
        return (w13, w2) if self.qtypes is None else ExpertBlocks(w13, self.qtypes[layer][0], w2, self.qtypes[layer][1])

    def host_weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | ExpertBlocks:
        """Layer `layer`'s experts in host memory, as layer_weights gives its slots."""
        w13, w2 = self.host_w13[layer], self.host_w2[layer]
        return (w13, w2) if self.qtypes is None else ExpertBlocks(w13, self.qtypes[layer][0], w2, self.qtypes[layer][1])

    def stage_by_sm(self, layer: int, in_place_ids: torch.Tensor, max_pairs: int
                    ) -> tuple[tuple[torch.Tensor, torch.Tensor] | ExpertBlocks, torch.Tensor]:
        """in_place_ids [T, K]: the expert of each pair the device reads from host memory, -1 for the others ->
        (rows holding those experts, as layer_weights gives slots; [T, K] each pair's row there, -1 for the others).
        Each pair's expert is copied into its own row by the SMs (sm_copy.gather_rows, from the device's ids: no host
        work, graph-capturable), to be run from device memory rather than read in place (STRATA_SM_STAGE=1, an A/B
        switch). The rows, max_pairs of the largest expert, are allocated at the first call (a warm-up run)."""
        pairs = in_place_ids.numel()
        if self._sm_rows is None:
            device = self._slots13.device
            self._sm_rows = (torch.zeros(max_pairs, max(self._bytes13), dtype=torch.uint8, device=device),
                             torch.zeros(max_pairs, max(self._bytes2), dtype=torch.uint8, device=device))
        if pairs > self._sm_rows[0].shape[0]:
            raise ValueError(f"stage_by_sm: {pairs} pairs but rows for {self._sm_rows[0].shape[0]}")
        host13, host2 = self.host_w13[layer], self.host_w2[layer]
        rows13, rows2 = _slot_view(self._sm_rows[0][:pairs], host13), _slot_view(self._sm_rows[1][:pairs], host2)
        flat = in_place_ids.reshape(-1)                                                            # [T * K]
        gather_rows(rows13, host13, flat)
        gather_rows(rows2, host2, flat)
        local = torch.where(in_place_ids >= 0, torch.arange(pairs, device=flat.device).view_as(in_place_ids), -1)
        weights = (rows13, rows2) if self.qtypes is None else \
            ExpertBlocks(rows13, self.qtypes[layer][0], rows2, self.qtypes[layer][1])
        return weights, local

    def expert_bytes(self, layer: int) -> int:
        """Bytes one expert of `layer` moves when copied to a slot."""
        return self._bytes13[layer] + self._bytes2[layer]

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

    def set_zero_copy(self, experts: list[Expert]) -> None:
        """The experts the device reads in place from host memory (replacing any earlier set); a slot, where one
        of them holds one, comes first. One host-to-device copy that does not wait for the device (the hot set's
        update calls this between steps), none when the set is unchanged."""
        ids = torch.full(tuple(self.zero_copy_ids.shape), -1, dtype=torch.long)                  # [L, E], host
        if experts:
            chosen = torch.tensor(experts, dtype=torch.long)                                     # [N, 2]
            ids[chosen[:, 0], chosen[:, 1]] = chosen[:, 1]
        if torch.equal(ids, self._zero_copy_host):
            return
        self._zero_copy_host = ids
        self.zero_copy_ids.copy_(index_tensor(ids, self.zero_copy_ids.device))
        self.zero_copy_per_layer = (ids >= 0).sum(1).tolist()

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
        return sum(self.expert_bytes(layer) for layer, _ in experts)

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
        """Queue the copies of `experts` into `slots` on the current stream."""
        if self._dma is not None:  # two runtime calls an expert: on a staging layer's critical path
            stream = torch.cuda.current_stream(self._slots13.device).cuda_stream
            rows13, rows2 = self._slots13.stride(0), self._slots2.stride(0)
            for (layer, expert), slot in zip(experts, slots):
                base13, base2 = self._host_bases[layer]
                size13, size2 = self._bytes13[layer], self._bytes2[layer]
                dma.copy_to_device(self._dma, self._slots13.data_ptr() + slot * rows13, base13 + expert * size13,
                                   size13, stream)
                dma.copy_to_device(self._dma, self._slots2.data_ptr() + slot * rows2, base2 + expert * size2, size2,
                                   stream)
            return
        for (layer, expert), slot in zip(experts, slots):
            self._slots13[slot, :self._bytes13[layer]].copy_(_as_bytes(self.host_w13[layer][expert]), non_blocking=True)
            self._slots2[slot, :self._bytes2[layer]].copy_(_as_bytes(self.host_w2[layer][expert]), non_blocking=True)

    def _is_pending(self, expert: Expert) -> bool:
        return any(expert in experts for _, experts, _ in self.pending)


def _expert_nbytes(weights: torch.Tensor) -> int:
    """Bytes of one expert of weights [E, ...]."""
    return weights[0].numel() * weights.element_size()


def _as_bytes(weights: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat uint8 view."""
    return weights.reshape(-1).view(torch.uint8)


def _slot_view(slots: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
    """slots uint8 [N + S, slot bytes] seen as [N + S, *host.shape[1:]] in host's dtype (each expert's
    leading bytes of its slot)."""
    nbytes = _expert_nbytes(host)
    typed = slots.view(host.dtype) if host.dtype != torch.uint8 else slots  # [N + S, slot bytes / size]
    return typed[:, :nbytes // host.element_size()].unflatten(1, host.shape[1:])
