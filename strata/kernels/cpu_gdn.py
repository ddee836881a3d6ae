"""The gated delta rule of Gated DeltaNet layers on the CPU for a step's windows (decode, verification, prompt
chunks: faster than the chunked torch form at every length measured): native/gdn_recurrent_cpu.c, in cpu_quant's
library and on its thread pool. Each sequence's state is read and written in place in the pool, one column tile at
a time, where the torch path gathered, masked, decayed, added an outer product and scattered [S, Hv, Dk, Dv] float32
in ~9 passes (Qwen3-Next's 32 heads of 128 x 128: 1.8-1.9 ms a layer for one sequence, 15.6-19.8 for four, at
torch's one thread on the 2-core VM, against 0.20-0.23 and 0.65-0.70 here; bench/results/2026-12-06-cpu-session61).
A token's result has the same bits in any window, batch or thread count, so a verification window's rows equal the
same tokens decoded one by one.

`recurrent` takes q and k per value head, L2-normalised, q already scaled by Dk^-1/2, and decay = exp(g);
strata.kernels.gdn.gdn_recurrent_ref states the rule (tests/kernels/test_cpu_gdn.py holds the kernel to it).

`conv_windows` is the layer's causal conv before it (and PLE's, dilated): native/conv_windows_cpu.c, the torch
form's bits (tests/kernels/test_cpu_conv.py) in one pass over each sequence's inputs and history."""

from __future__ import annotations

import functools

import torch

from strata.kernels import cpu_quant

# state values x tokens under which one thread does a call: waking the pool costs more
_ONE_THREAD_WORK = 1 << 16


def available() -> bool:
    """The native library is built here with the kernel (else the caller keeps its torch path)."""
    library = cpu_quant._load()
    return library is not None and hasattr(library, cpu_quant._GDN)


def recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
              pool: torch.Tensor, slots: torch.Tensor, begins: torch.Tensor, ends: torch.Tensor,
              has_initial: torch.Tensor, out: torch.Tensor, all_states: torch.Tensor | None = None) -> None:
    """q, k [T, Hv, Dk], v [T, Hv, Dv], decay and beta [T, Hv] (float32); pool [S_max, Hv, Dk, Dv] float32; for
    each sequence s its pool row slots[s], its tokens begins[s] <= t < ends[s] and has_initial[s] (False: start
    from zeros), all [S] int64 -> out [T, Hv, Dv] float32 written at those tokens, all_states [T, Hv, Dk, Dv] (if
    given; at least max(ends) rows) the state after each of them, the state after each sequence's last token in its
    pool row."""
    tokens, heads, dim_k = q.shape
    dim_v = v.shape[2]
    floats = {"q": q, "k": k, "v": v, "decay": decay, "beta": beta, "pool": pool, "out": out}
    if all_states is not None:
        floats["all_states"] = all_states
    bad = [name for name, t in floats.items() if t.dtype != torch.float32 or not t.is_cpu or not t.is_contiguous()]
    if bad:
        raise ValueError(f"cpu_gdn.recurrent: {', '.join(bad)} must be contiguous CPU float32 tensors")
    shapes = {"k": (k.shape, q.shape), "v": (v.shape, (tokens, heads, dim_v)), "decay": (decay.shape, (tokens, heads)),
              "beta": (beta.shape, (tokens, heads)), "pool": (pool.shape[1:], (heads, dim_k, dim_v)),
              "out": (out.shape, v.shape)}
    ints = [t.to(torch.int64).contiguous() for t in (slots, begins, ends, has_initial)]
    if all_states is not None:  # rows up to the last token given (a step's leading windows keep only theirs)
        rows = min(int(ints[2].max()), tokens) if ints[2].numel() else 0  # ends past T: the kernel refuses them
        shapes["all_states"] = ((min(all_states.shape[0], rows), *all_states.shape[1:]), (rows, heads, dim_k, dim_v))
    wrong = [f"{name} {tuple(got)} (wants {tuple(want)})" for name, (got, want) in shapes.items()
             if tuple(got) != tuple(want)]
    if wrong:
        raise ValueError(f"cpu_gdn.recurrent: for q {tuple(q.shape)}: {', '.join(wrong)}")
    num_seqs = ints[0].shape[0]
    work = int((ints[2] - ints[1]).sum()) * heads * dim_k * dim_v
    threads = 1 if work < _ONE_THREAD_WORK else cpu_quant._threads()
    status = _kernel()(q.data_ptr(), k.data_ptr(), v.data_ptr(), decay.data_ptr(), beta.data_ptr(), tokens, heads,
                       dim_k, dim_v, pool.data_ptr(), pool.shape[0], *(t.data_ptr() for t in ints), num_seqs,
                       out.data_ptr(), 0 if all_states is None else all_states.data_ptr(), threads)
    if status != 0:
        raise IndexError(f"cpu_gdn.recurrent: slots {ints[0].tolist()} or tokens {ints[1].tolist()}..."
                         f"{ints[2].tolist()} outside the pool's {pool.shape[0]} rows or the {tokens} tokens")


@functools.cache
def _kernel():
    """The AVX2 build where the CPU has it (the same bits: no fused multiply-adds, sums in a fixed order)."""
    return cpu_quant.entry(cpu_quant._GDN, cpu_quant._GDN_AVX2)


def conv_available() -> bool:
    """The native library is built here with conv_windows' kernel (else the caller keeps its torch path)."""
    library = cpu_quant._load()
    return library is not None and hasattr(library, cpu_quant._CONV)


def conv_windows(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor, slots: torch.Tensor,
                 begins: torch.Tensor, ends: torch.Tensor, has_initial: torch.Tensor, dilation: int = 1,
                 keep_windows: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The depthwise causal conv of each sequence's tokens after its remembered inputs (native/conv_windows_cpu.c):
    x [T, C] float32 (rows may be strided), weight [C, W], state [S_max, C, H] float32 with H = (W - 1) * dilation;
    for each sequence s its pool row slots[s], its tokens begins[s] <= t < ends[s], has_initial[s] (False: a zero
    history), all [S] -> (out [T, C] float32 at those tokens, pre-activation; the history after each of them
    [T, C, H] when keep_windows, else None); each sequence's last H inputs written to its pool row. The same bits as
    model/gated_delta_net.causal_conv1d_ragged's torch form."""
    tokens, channels = x.shape
    width = weight.shape[1]
    history = (width - 1) * dilation
    if x.dtype != torch.float32 or not x.is_cpu or x.stride(1) != 1:
        raise ValueError(f"cpu_gdn.conv_windows: x must be a CPU float32 [T, C] tensor with unit column stride, got "
                         f"{x.dtype} strides {x.stride()}")
    bad = [name for name, t in (("weight", weight), ("state", state)) if t.dtype != torch.float32 or not t.is_cpu
           or not t.is_contiguous()]
    if bad or weight.shape[0] != channels or tuple(state.shape[1:]) != (channels, history):
        raise ValueError(f"cpu_gdn.conv_windows: for x {tuple(x.shape)} wants contiguous CPU float32 weight "
                         f"[{channels}, W] and state [S, {channels}, (W - 1) * {dilation}], got weight "
                         f"{tuple(weight.shape)} {weight.dtype}, state {tuple(state.shape)} {state.dtype}")
    ints = [t.to(torch.int64).contiguous() for t in (slots, begins, ends, has_initial)]
    out = x.new_empty(tokens, channels)
    window = x.new_empty(tokens, channels, history) if keep_windows else None
    work = int((ints[2] - ints[1]).sum()) * channels * width
    threads = 1 if work < _ONE_THREAD_WORK * 4 else cpu_quant._threads()
    status = getattr(cpu_quant._require(), cpu_quant._CONV)(
        x.data_ptr(), x.stride(0), tokens, channels, weight.data_ptr(), width, dilation, state.data_ptr(),
        state.shape[0], *(t.data_ptr() for t in ints), ints[0].shape[0], out.data_ptr(),
        0 if window is None else window.data_ptr(), threads)
    if status != 0:
        raise IndexError(f"cpu_gdn.conv_windows: slots {ints[0].tolist()} or tokens {ints[1].tolist()}..."
                         f"{ints[2].tolist()} outside the pool's {state.shape[0]} rows or the {tokens} tokens, or a "
                         f"history of {history} (at most 32)")
    return out, window
