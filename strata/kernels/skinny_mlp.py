"""A single-token SwiGLU MLP (and Qwen3-Next's sigmoid-gated shared expert) in two Triton launches.

The torch form takes four launches for a dense MLP (gate/up GEMV, silu, multiply, down GEMV) and seven for a
gated shared expert (its gate's GEMV, a sigmoid and a multiply more), each a few microseconds of a decode
step whose weights take about as long to read. Here:
  1. gate/up: each program streams BLOCK_N gate rows and the matching up rows through a K loop and writes
     h = silu(g) * u; with a shared-expert gate, one extra program computes s = sigmoid(gate . x);
  2. down: y = W_down @ h, times s when gated.
Every intermediate is rounded to the model dtype where the torch form rounds it (the GEMV outputs, silu's,
the products), so the two agree up to summation order and the last bits of exp.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: skinny_mlp_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel

UP_CONFIG = dict(BLOCK_N=2, BLOCK_K=1024, num_warps=4)
DOWN_CONFIG = dict(BLOCK_N=2, BLOCK_K=1024, num_warps=4)


def skinny_mlp_ref(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                   gate: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, D], gate_up [2I, D] (gate rows then up rows), down [D, I], gate [1, D] or None -> [T, D]:
    down(silu(g) * u), times sigmoid(x @ gate.T) when gated (DenseMLP, MoEBlock._shared)."""
    g, u = F.linear(x, gate_up).chunk(2, dim=-1)                                 # [T, I] each
    out = F.linear(F.silu(g) * u, down)
    return out if gate is None else torch.sigmoid(F.linear(x, gate)) * out


def skinny_mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
               gate: torch.Tensor | None = None) -> torch.Tensor:
    """skinny_mlp_ref for one 16-bit row x [1, D] and contiguous weights of its dtype, in two launches."""
    dim = x.shape[1]
    inter = down.shape[1]
    assert x.shape[0] == 1 and x.stride(1) == 1 and gate_up.shape == (2 * inter, dim) and down.shape[0] == dim
    assert gate_up.is_contiguous() and down.is_contiguous() and (gate is None or gate.is_contiguous())
    h = torch.empty(1, inter + 1, dtype=x.dtype, device=x.device)    # [1, I] activations, then the gate's s
    up_programs = triton.cdiv(inter, UP_CONFIG["BLOCK_N"])
    _gate_up_act_kernel[(up_programs + (gate is not None),)](
        x, gate_up, gate if gate is not None else x, h, inter, dim, up_programs,
        BLOCK_N=UP_CONFIG["BLOCK_N"], BLOCK_K=UP_CONFIG["BLOCK_K"], num_warps=UP_CONFIG["num_warps"], **pdl_options(x))
    out = torch.empty(1, dim, dtype=x.dtype, device=x.device)
    _down_scale_kernel[(triton.cdiv(dim, DOWN_CONFIG["BLOCK_N"]),)](
        h, down, out, dim, inter, HAS_GATE=gate is not None, BLOCK_N=DOWN_CONFIG["BLOCK_N"],
        BLOCK_K=DOWN_CONFIG["BLOCK_K"], num_warps=DOWN_CONFIG["num_warps"], **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _row_dots(x_ptr, w_ptr, rows, rows_ok, dim_in, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """x [dim_in] . W[rows] for BLOCK_N rows -> [BLOCK_N] float32 sums."""
        offs_k = tl.arange(0, BLOCK_K)
        w_ptrs = w_ptr + rows[:, None].to(tl.int64) * dim_in + offs_k[None, :]           # [BN, BK]
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, dim_in, BLOCK_K):
            k_ok = offs_k < dim_in - k0
            x = tl.load(x_ptr + k0 + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            w = tl.load(w_ptrs + k0, mask=rows_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            acc += w * x[None, :]
        return tl.sum(acc, axis=1)

    @triton.jit
    def _gate_up_act_kernel(x_ptr, w_ptr, gate_ptr, h_ptr, inter, dim, up_programs,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pid = tl.program_id(0)
        dtype = h_ptr.dtype.element_ty
        if pid < up_programs:
            cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
            ok = cols < inter
            g = _row_dots(x_ptr, w_ptr, cols, ok, dim, BLOCK_N, BLOCK_K).to(dtype).to(tl.float32)
            u = _row_dots(x_ptr, w_ptr, cols + inter, ok, dim, BLOCK_N, BLOCK_K).to(dtype).to(tl.float32)
            act = (g * tl.sigmoid(g)).to(dtype).to(tl.float32)                          # silu, rounded
            tl.store(h_ptr + cols, (act * u).to(dtype), mask=ok)
        else:  # the shared expert's gate: s = sigmoid(gate . x), rounded like torch's linear and sigmoid
            one = tl.arange(0, 1)
            logit = _row_dots(x_ptr, gate_ptr, one, one < 1, dim, 1, BLOCK_K).to(dtype).to(tl.float32)
            tl.store(h_ptr + inter + one, tl.sigmoid(logit).to(dtype))

    @triton.jit
    def _down_scale_kernel(h_ptr, w_ptr, out_ptr, dim, inter, HAS_GATE: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = rows < dim
        dtype = out_ptr.dtype.element_ty
        y = _row_dots(h_ptr, w_ptr, rows, ok, inter, BLOCK_N, BLOCK_K).to(dtype)
        if HAS_GATE:
            y = (tl.load(h_ptr + inter).to(tl.float32) * y.to(tl.float32)).to(dtype)
        tl.store(out_ptr + rows, y, mask=ok)
