"""Host-to-device copies of small index arrays that do not make the host wait for the device, their way back
(HostCopy), device rows into host memory without a wait (rows_to_host, RowsToHost), host memory page-locked in
place (pin_in_place) or copied into huge-page-backed memory of its own (host_copy), how much of it is free
(host_available_bytes), and byte views for copying float8 tensors.

Host copies (offloaded experts, a PLE table from a GGUF file's map) are backed by 2 MiB pages where the kernel allows
(transparent huge pages on request) and registered with CUDA. The CPU expert pool streams these weights at memory
speed; with 4 KiB pages a model's experts (~30 GB for 24 layers of Qwen3-30B-A3B) need page-table walks that miss
the caches, and the hardware prefetchers stop at every page boundary: on the H200 host one 8-expert call took 0.84 ms
on torch's pinned memory and 0.75 ms on huge pages (.devscripts/hugepage_bench.py,
bench/results/2026-11-29-h200-session4). Without THP, or when registering fails, it falls back to plain (then
pinned) memory."""

from __future__ import annotations

import logging
import mmap
import weakref

import torch

logger = logging.getLogger(__name__)


FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def raw(t: torch.Tensor) -> torch.Tensor:
    """t, or for float8 its bytes (a uint8 view): torch lacks index_copy_ for float8; copies of bytes are exact."""
    return t.view(torch.uint8) if t.dtype in FLOAT8 else t


def index_tensor(values, device: torch.device | str, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A host list (or CPU tensor) of indices on `device`. To CUDA it goes through pinned memory without
    blocking: a plain copy from pageable memory makes the host wait for the device to drain its queue,
    which inside a layer serialises the host's launches with the device's work."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda" or torch.cuda.is_current_stream_capturing():
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def pin_in_place(host: torch.Tensor, what: str) -> bool:
    """Page-lock `host` (a CPU tensor in anonymous memory) where it lies, so copies from it are asynchronous and the
    device's kernels may read it over PCIe (CUDA's unified addressing); unlocked when this tensor object is
    collected, so pass one that lives as long as the memory is read (not a fresh view). False, with a warning naming
    `what`, where CUDA refuses it. Not for a file's map (False, with a warning naming the file): on an H100 host,
    registering a 3.5 GB range of a GGUF file's read-only map (cudaHostRegisterReadOnly) ran in the kernel for over
    12 minutes (session 72); host_copy it."""
    start = host.data_ptr()
    mapped = mapped_file(start)
    if mapped is not None:
        logger.warning("not page-locking %s where it lies: it is in the map of %s (copy it first: host_copy)", what,
                       mapped)
        return False
    return _register(host, what)


def _register(host: torch.Tensor, what: str) -> bool:
    """pin_in_place's registration, for memory known to be anonymous (host_copy's)."""
    cudart = torch.cuda.cudart()
    start = host.data_ptr()
    error = cudart.cudaHostRegister(start, host.numel() * host.element_size(), 0)
    if error != cudart.cudaError.success:
        logger.warning("cudaHostRegister failed for %s (%s)", what, error)
        return False
    weakref.finalize(host, cudart.cudaHostUnregister, start)
    return True


def mapped_file(address: int) -> str | None:
    """The file whose map holds `address` in this process (/proc/self/maps), None for anonymous memory, shared
    memory (/dev/shm, /dev/zero, memfd) or where the maps cannot be read."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                low, high = (int(bound, 16) for bound in fields[0].split("-"))
                if low <= address < high:
                    path = fields[5].strip() if len(fields) > 5 else ""
                    in_memory = path.startswith(("/dev/", "/memfd:"))
                    return path if path.startswith("/") and fields[4] != "0" and not in_memory else None
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_copy(weights: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host copy of `weights` (any device) in huge-page-backed memory, pinned when `pin`."""
    weights = weights.detach()
    nbytes = weights.numel() * weights.element_size()
    if nbytes == 0:
        return weights.to("cpu", copy=True)
    buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buffer.madvise(mmap.MADV_HUGEPAGE)  # before the first touch, which allocates the pages
    except (AttributeError, OSError):  # no THP here: 4 KiB pages still work
        pass
    host = torch.frombuffer(buffer, dtype=weights.dtype, count=weights.numel()).view(weights.shape)
    host.copy_(weights)
    # page-locked for asynchronous copies, unlocked when the tensor is collected (before its memory is unmapped)
    if pin and not _register(host, "host weights (they use torch's pinned memory)"):  # (anonymous: no maps check)
        return host.pin_memory()
    return host


def host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (RAM the kernel can hand out without swapping), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def consecutive_runs(ids: list[int]) -> list[tuple[int, int, int]]:
    """ids -> (index of the run's first id in ids, its first id, its length) for each run of consecutive ids."""
    runs = []
    for i, block in enumerate(ids):
        if runs and runs[-1][1] + runs[-1][2] == block:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, block, 1))
    return runs


class RowsToHost:
    """Device rows copied into host memory, queued on the stream (rows_to_host), and the one wait the host makes
    before it reads or writes those host rows itself (`settle`)."""

    def __init__(self) -> None:
        self.copied: torch.cuda.Event | None = None  # recorded after the last copy still unsettled

    def queue(self, src: dict, src_ids: list[int], dst: dict, dst_ids: list[int]) -> None:
        if not src:  # no such cache here (a pipeline stage without attention, or without recurrent, layers)
            return
        rows_to_host(src, src_ids, dst, dst_ids)
        if next(iter(src.values()))[0].is_cuda:
            self.copied = torch.cuda.Event()
            self.copied.record()

    def settle(self) -> None:
        """Wait until the queued copies have landed in host memory."""
        if self.copied is not None:
            self.copied.synchronize()
            self.copied = None


def rows_to_host(src: dict, src_ids: list[int], dst: dict, dst_ids: list[int]) -> None:
    """dst[key][i][dst_ids] = src[key][i][src_ids] for both tensors of every key, src on the device (or the CPU),
    dst in host memory: the rows gathered on the device, then one copy per run of consecutive host rows straight
    into the (pinned) host tensor, asynchronous with the host: it must wait for the stream (an event) before it
    reads or writes those rows itself."""
    index = index_tensor(src_ids, next(iter(src.values()))[0].device)
    runs = consecutive_runs(dst_ids)
    for key, pair in src.items():
        for source, target in zip(pair, dst[key]):
            if source.numel() == 0:  # the empty second tensor of an extra key (QSA's index keys)
                continue
            rows = raw(source).index_select(0, index)                       # [n, ...] on the source's device
            for first, start, count in runs:
                raw(target)[start:start + count].copy_(rows[first:first + count], non_blocking=True)


class HostCopy:
    """A step's small device tensor copied to host memory through one pinned buffer: `queue` queues the copy
    (inside a CUDA graph capture too: the graph's copy then lands in the same buffer at each replay), `wait`
    waits for it. The buffer grows outside captures only (each capture's warm-up run comes first); a graph
    keeps the buffer it captured alive through the views it holds."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None

    def queue(self, x: torch.Tensor) -> torch.Tensor:
        """x [...] -> its copy [x.numel()] in host memory, to read after `wait` (x itself, flattened, on the CPU)."""
        if not x.is_cuda:
            return x.flatten()
        if self.buffer is None or self.buffer.numel() < x.numel() or self.buffer.dtype != x.dtype:
            assert not torch.cuda.is_current_stream_capturing(), "HostCopy grows only outside graph captures"
            self.buffer = torch.empty(x.numel(), dtype=x.dtype, pin_memory=True)
        host = self.buffer[:x.numel()]
        host.copy_(x.flatten(), non_blocking=True)
        return host

    @staticmethod
    def wait(device: torch.device) -> None:
        """Everything queued on `device`'s current stream has run (the copies `queue` made included)."""
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
