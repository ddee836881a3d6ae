"""The one function that builds a model from a weight source: allocate on the target device in the
runtime dtype, stream tensors in with a progress bar, check every parameter was filled."""

from __future__ import annotations

import contextlib
import sys
import time

import torch
from torch import nn

from strata import progress
from strata.config import debug_value
from strata.kernels import packed_dequant
from strata.model.registry import (PackedLocalExperts, PackedWeight, dense_on_gpu, expert_weights_on, model_class,
                                   owning_layers, tables_packed)
from strata.transfer import host_available_bytes, host_copy, pin_in_place
from strata.weights.source import WeightSource

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(source: WeightSource, device: str, dtype: str, seed: int = 0, quiet: bool = False,
                expert_device: str | None = None, owned_layers: range | None = None) -> nn.Module:
    """`expert_device`: where the routed experts' weights go (e.g. "cpu" when only a hot set of them
    will be copied to the GPU); None puts them on `device` with everything else. `owned_layers`: a pipeline
    stage's layers, the only ones given weights (the others stay shapes on the meta device, unread)."""
    cfg = source.model_config()
    torch_dtype = DTYPES[dtype]
    started = time.perf_counter()
    mem_before = _device_memory(device)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        with torch.device(device), _skip_default_init(), expert_weights_on(expert_device, source.experts_packed), \
                tables_packed(getattr(source, "lookup_tables_packed", False)), owning_layers(owned_layers):
            model = model_class(cfg)(cfg)
    finally:
        torch.set_default_dtype(previous)
    model.eval().requires_grad_(False)
    init = getattr(source, "initialize", None)
    if init is not None:
        init(model, seed)
    else:
        with progress.bar(f"loading {source.description}", source.num_tensors(), quiet) as advance:
            model.load_weights(_counted(source.tensors(torch_dtype), advance), source.description)
    if device.startswith("cuda"):
        _dequantize_dense_on_gpu(model, torch_dtype)
    place_host_tables(model, device, quiet)
    used = _device_memory(device) - mem_before
    if not quiet:
        print(f"loaded {cfg.architecture} ({_describe_weights(model, dtype)}) on {device} in "
              f"{time.perf_counter() - started:.1f}s, {used / 2**20:.0f} MiB", file=sys.stderr)
    return model


def _dequantize_dense_on_gpu(model: nn.Module, dtype: torch.dtype) -> None:
    """The packed weights a CUDA model reads dense (packed.dense_on_gpu: Qwen4-Exp's hyper-connection mixers), each
    dequantized where it lies into a parameter of `dtype` (the values a dense load of the file gives)."""
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, PackedWeight) and dense_on_gpu(f"{name}.weight"):
            module.weight = nn.Parameter(weight.dequantize(torch.float32).to(dtype), requires_grad=False)


# host-resident tables (Qwen4-Exp's PLE) move to the GPU when they take at most this share of its memory
HOST_TABLE_GPU_SHARE = 0.25
# RAM left free beside a table over a file's map that is page-locked for the device to read in place
TABLE_LOCK_HEADROOM = 4 * 2**30


def place_host_tables(model: nn.Module, device: str, quiet: bool = False) -> None:
    """Modules marked `host_resident` load in host memory; on a GPU that holds them easily (a table of a
    benchmark shape, not the real model's 95 GiB one) they move there, so their layers need no host work.
    Tables kept as GGUF blocks stay over the file's map. (The tables left in host memory are page-locked for the
    device to read in place once the offloaded experts have their host copies: lock_host_tables.)"""
    if not device.startswith("cuda"):
        return
    tables = _host_tables(model)
    size = sum(p.numel() * p.element_size() for m in tables for p in m.parameters())
    packed = any(isinstance(t, PackedWeight) for m in tables for t in vars(m).values()) or \
        any(isinstance(getattr(c, "weight", None), PackedWeight) for m in tables for c in m.children())
    if tables and not packed and size <= HOST_TABLE_GPU_SHARE * torch.cuda.get_device_properties(device).total_memory:
        for m in tables:
            m.to(device)
        if not quiet:
            print(f"PLE tables ({size / 2**20:.0f} MiB) fit on {device}: moved there", file=sys.stderr)


def lock_host_tables(model: nn.Module, device: str, quiet: bool = False) -> None:
    """On CUDA, the tables place_host_tables left in host memory, page-locked for the device to read in place
    (_pin_tables: a dense one where it lies, a GGUF file's blocks copied off the map first). Called after the offloaded experts' host copies are made (engine.build), so the free
    RAM a table over a file's map is checked against is what they left. STRATA_PLE_IN_PLACE=0 leaves the host
    gathering the rows between two graph parts."""
    if not device.startswith("cuda") or debug_value("PLE_IN_PLACE") == "0":
        return
    # (not the tables place_host_tables moved to the GPU; a packed table's blocks are no parameter)
    tables = [m for m in _host_tables(model) if all(p.device.type == "cpu" for p in m.parameters())]
    if tables:
        _pin_tables(tables, quiet)


def _host_tables(model: nn.Module) -> list[nn.Module]:
    # (a pipeline stage that does not own a table's layer holds it as shapes only: none of its tables)
    return [m for m in model.modules() if getattr(m, "host_resident", False)
            and not all(t.is_meta for t in [*m.parameters(), *m.buffers()])]


def _pin_tables(tables: list[nn.Module], quiet: bool) -> None:
    """Tables left in host memory, page-locked (a dense one where it lies; a GGUF file's blocks copied from the
    file's map into page-locked memory of their own, transfer.host_copy: locking the map itself ran for minutes): the
    device gathers a step's rows itself over PCIe (NGramEmbedding.read_in_place), inside the step's graph, instead
    of the host between two graph parts. Session 71 on an H100, issue 29's 4-stream command on Qwen4-Exp 4L: 2,273 /
    3,341 tok/s (none / speculation) against 2,070 / 2,992 with the host gather, token gap p95 4.0 against 7.5 ms."""
    started, size = time.perf_counter(), 0
    for m in tables:
        weight = m.ngram_embedding.weight
        # the tensor that lives as long as the model (pin_in_place unlocks the memory once the tensor object it got
        # is collected: a `.data` view would be at once): the parameter, or the packed weight's blocks buffer
        packed = isinstance(weight, PackedWeight)
        table = weight.blocks if packed else weight                                # [R, E / heads] (packed: bytes)
        whole_words = table.shape[1] * table.element_size() % 4 == 0 and table.data_ptr() % 4 == 0
        # (packed: blocks of a type the dequantizing gather reads, or dense rows the word gather moves)
        readable = whole_words or (packed and packed_dequant.supports(weight.qtype, weight.shape[1]))
        if not readable or (packed and weight.reorders):
            continue
        nbytes = table.numel() * table.element_size()
        # a table over the file's map is not all in RAM yet, and a copy in locked memory takes its bytes: only with
        # room to spare (a dense one is resident already)
        available = host_available_bytes() if packed else None
        if available is not None and nbytes + TABLE_LOCK_HEADROOM > available:
            if not quiet:
                print(f"PLE table ({nbytes / 2**30:.1f} GiB) not page-locked: {available / 2**30:.1f} GiB of RAM "
                      f"free; the host gathers its rows", file=sys.stderr)
            continue
        if packed:  # the buffer (not a view) the packed weight reads: the copy lives as long as the model
            with progress.status(f"copying the PLE table ({nbytes / 2**30:.1f} GiB) into page-locked RAM", quiet):
                weight.blocks0 = table = host_copy(table, pin=False)
        m.read_in_place = pin_in_place(table, "a PLE table (the host gathers its rows)")
        size += nbytes
    if not quiet and all(m.read_in_place for m in tables):
        print(f"PLE tables ({size / 2**30:.1f} GiB) page-locked in host memory in {time.perf_counter() - started:.1f}"
              f" s: the device reads their rows in place", file=sys.stderr)


def _describe_weights(model: nn.Module, dtype: str) -> str:
    """"134.5M parameters, float32" or, with packed GGUF weights, "134.5M parameters, float32, 134.4M of
    them packed in 92 MiB" (a packed weight shared by two modules, a tied LM head, counts once)."""
    packed = {id(m): m for m in model.modules() if isinstance(m, PackedWeight)}.values()
    experts = [m.blocks() for m in model.modules() if isinstance(m, PackedLocalExperts)]
    num_packed = sum(w.shape.numel() for w in packed) + sum(e.num_experts * e.inter * e.hidden_size * 3 for e in experts)
    packed_bytes = sum(w.nbytes for w in packed) + sum(e.num_experts * e.expert_bytes for e in experts)
    text = f"{(sum(p.numel() for p in model.parameters()) + num_packed) / 1e6:.1f}M parameters, {dtype}"
    if num_packed:
        text += f", {num_packed / 1e6:.1f}M of them packed in {packed_bytes / 2**20:.0f} MiB"
    return text


@contextlib.contextmanager
def _skip_default_init():
    """Every parameter is overwritten by the checkpoint or the random source, so torch's default
    initialisers (seconds of work on a large model) are turned into no-ops while modules are built."""
    names = ("kaiming_uniform_", "uniform_", "normal_", "zeros_", "ones_")
    saved = {name: getattr(nn.init, name) for name in names}
    for name in names:
        setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def _counted(tensors, advance):
    for item in tensors:
        yield item
        advance()


def _device_memory(device: str) -> int:
    if device.startswith("cuda"):
        return torch.cuda.memory_allocated()
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except ImportError:
        return 0
