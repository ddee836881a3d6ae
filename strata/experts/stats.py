"""Routing statistics of every MoE layer, kept in device buffers.

`record` runs inside the forward (possibly inside a CUDA graph): fixed-size buffers, in-place device
ops only, no host sync. `end_step` runs once per step outside any graph and also never syncs; only
`snapshot` reads the buffers back to the host. `CounterMark` copies the step counters out without a sync,
for a benchmark that must not stall steps planned ahead to read them.

With offloaded experts the providers also count, on the host, the CPU and PCIe pairs of each token
row of the step's main forward (`begin_rows` / `record_rows` / `take_rows`): the runner turns them into
per-request shares.
"""

from __future__ import annotations

import numpy as np
import torch

from strata.kernels.routing import fold_step, record_routing_ref

_ALL_ROWS = 1 << 62


def all_rows(device: str | torch.device) -> torch.Tensor:
    """A real-rows scalar [1] that counts every row."""
    return torch.full((1,), _ALL_ROWS, dtype=torch.long, device=device)


class CounterMark:
    """(steps, distinct experts summed over layers and steps, layers that routed) as the stream stood when
    taken: copied into pinned host memory behind the work queued so far, with no host sync; `values` waits
    for that copy only when read."""

    def __init__(self, stats: RoutingStats) -> None:
        device_values = torch.stack([stats.num_steps[0], stats.touched_total.sum(),
                                     (stats.touched_total > 0).sum()])                # [3] int64
        self.event = None
        if device_values.is_cuda:
            self.host = torch.empty(3, dtype=torch.long, pin_memory=True)
            self.host.copy_(device_values, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = device_values

    def values(self) -> tuple[int, int, int]:
        if self.event is not None:
            self.event.synchronize()
        steps, touched, layers = self.host.tolist()
        return steps, touched, layers


class RoutingStats:
    def __init__(self, num_layers: int, num_experts: int, device: str | torch.device,
                 real_rows: torch.Tensor | None = None) -> None:
        self.num_layers, self.num_experts = num_layers, num_experts
        zeros = dict(dtype=torch.long, device=device)
        self.window_counts = torch.zeros(num_layers, num_experts, **zeros)  # [L, E] pairs routed this window
        self.total_counts = torch.zeros(num_layers, num_experts, **zeros)   # [L, E] pairs of past windows
        self.touched = torch.zeros(num_layers, num_experts, **zeros)        # [L, E] 1 = used this step
        self.touched_total = torch.zeros(num_layers, **zeros)               # [L] sum over steps of distinct experts
        self.num_steps = torch.zeros(1, **zeros)                            # [1] steps that routed any token
        self.gpu_pairs = torch.zeros(1, **zeros)                            # [1] (token, k) pairs on device slots
        self.host_pairs = [0, 0]  # (token, k) pairs computed on the CPU / staged over PCIe: host ints, no device op
        # [1] token rows at or past this index are padding (CUDA graph layouts) and not counted; the
        # runner keeps it current (graph steps copy it from their inputs); default: count every row
        self.real_rows = real_rows if real_rows is not None else all_rows(device)
        self.has_placement = False  # set when a provider reports where pairs ran
        self.num_swaps = 0
        self.bytes_moved = 0
        self.num_rows = 0  # token rows of the step being counted (begin_rows), and their pairs' row indices:
        self.row_lists: tuple[list, list] | None = None  # (CPU, PCIe) arrays per layer, while counting
        self.row_count_arrays: list[np.ndarray] = []  # [2, R] per layer from row_counter, while counting

    # ---- inside the forward (graph safe) ---------------------------------------------------------

    def record(self, layer_idx: int, topk_ids: torch.Tensor) -> None:
        """topk_ids [T, K] of MoE layer `layer_idx`: count each (token, k) pair, mark its expert used."""
        record_routing_ref(topk_ids, self.window_counts[layer_idx], self.touched[layer_idx], self.real_rows)

    def layer_rows(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(window counts [E], touched [E], real rows [1]) of one layer, for kernels that record while
        routing (strata.kernels.routing.softmax_topk does record()'s work in its own launch)."""
        return self.window_counts[layer_idx], self.touched[layer_idx], self.real_rows

    def record_resident(self, resident: torch.Tensor) -> None:
        """resident [T, K] bool: pairs served by device slots."""
        self.gpu_pairs.add_(resident.sum())

    # ---- on the host: per token row of the main forward ------------------------------------------

    def begin_rows(self, num_rows: int) -> None:
        self.num_rows = num_rows
        self.row_lists = ([], [])
        self.row_count_arrays = []

    def record_rows(self, cpu_rows: np.ndarray, pcie_rows: np.ndarray) -> None:
        """Row index of every pair computed on the CPU / staged over PCIe (ignored when not counting).
        Kept as arrays and counted once per step in take_rows: this runs once per offloaded layer."""
        if self.row_lists is not None:
            self.row_lists[0].append(cpu_rows)
            self.row_lists[1].append(pcie_rows)

    def row_counter(self, num_rows: int) -> np.ndarray | None:
        """While counting: a zeroed int64 [2, num_rows] array for one layer's CPU and PCIe pairs per row, which
        take_rows adds (a native host part fills it); None otherwise."""
        if self.row_lists is None:
            return None
        counts = np.zeros((2, num_rows), dtype=np.int64)
        self.row_count_arrays.append(counts)
        return counts

    def take_rows(self) -> np.ndarray | None:
        """[2, T]: CPU and PCIe pairs per token row of the step begun by begin_rows (None if none was)."""
        if self.row_lists is None:
            return None
        lists, self.row_lists = self.row_lists, None
        counts = np.zeros((2, self.num_rows), dtype=np.int64)
        for row_counts, arrays in zip(counts, lists):
            rows = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
            row_counts += np.bincount(rows[rows < self.num_rows], minlength=self.num_rows)
        for layer_counts in self.row_count_arrays:
            width = min(layer_counts.shape[1], self.num_rows)
            counts[:, :width] += layer_counts[:, :width]
        self.row_count_arrays = []
        return counts

    # ---- on the host, outside the forward ----------------------------------------------------------

    def record_offloaded(self, num_cpu_pairs: int, num_pcie_pairs: int, bytes_copied: int) -> None:
        self.host_pairs[0] += num_cpu_pairs
        self.host_pairs[1] += num_pcie_pairs
        self.bytes_moved += bytes_copied

    def record_swaps(self, num_swaps: int, bytes_copied: int) -> None:
        self.num_swaps += num_swaps
        self.bytes_moved += bytes_copied

    def end_step(self) -> None:
        """Fold this step's distinct experts per layer into the running totals; no host sync."""
        fold_step(self.touched, self.touched_total, self.num_steps)

    def end_window(self) -> None:
        self.total_counts += self.window_counts
        self.window_counts.zero_()

    def pair_counts(self) -> tuple[int, int, int]:
        """(GPU, CPU, PCIe) (token, k) pairs so far (host sync)."""
        return int(self.gpu_pairs.item()), *self.host_pairs

    def counts(self) -> torch.Tensor:
        """[L, E] all pairs routed since the start (host sync)."""
        return (self.total_counts + self.window_counts).cpu()

    def snapshot(self, with_counts: bool = True) -> dict:
        """Plain data (one host sync): steps, mean distinct experts touched per layer and step,
        and once a provider reports placement, the GPU / CPU / PCIe shares of routed pairs."""
        steps, touched, layers, gpu = torch.cat([self.num_steps, self.touched_total.sum().view(1),
                                                 (self.touched_total > 0).sum().view(1), self.gpu_pairs]).tolist()
        cpu, pcie = self.host_pairs
        # over the layers that routed at all: an MTP head's MoE layer that never drafted does not count
        out = {"steps": steps, "mean_experts_touched_per_layer": touched / (steps * layers) if steps and layers else 0.0}
        if with_counts:
            out["counts"] = self.counts().tolist()
        if self.has_placement:
            pairs = gpu + cpu + pcie
            out.update(gpu_hit_rate=gpu / pairs if pairs else 0.0, cpu_share=cpu / pairs if pairs else 0.0,
                       pcie_share=pcie / pairs if pairs else 0.0, swaps=self.num_swaps,
                       bytes_moved=self.bytes_moved)
        return out
