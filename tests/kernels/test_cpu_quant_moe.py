"""quant_moe (strata/kernels/cpu_quant.py, native/quant_moe.c): one MoE layer's routed experts on GGUF blocks.

Two elementwise bounds, each a sum over the row's pairs of |weight| * |W2[e]| @ (a bound on act's error):
- against quant_moe_ref (float64 on the same quantized activations), float32 rounding only: gate and up
  are off by at most 1e-5 * (|x_hat| @ |W|) (the matmul kernel's slack, test_cpu_quant), silu(gate) * up by
  what that propagates (|silu'| <= 1.1). act is then quantized again, so where act / d lies within that
  error of a rounding boundary (.5) the kernel's int8 value may be a step from the reference's: such
  values get a step of slack, the others |q| times the scale's error; the down projection adds
  1e-5 * |W2| @ |act|. The steps make this bound 2-11 % of the layer's output here (the kernel is 1e-7
  off: no value flipped), so test_act_is_float32_until_quantized checks act itself to half a step.
- against "dequantize, then the float32 experts" (fused_moe_ref): each hidden value quantized is off by at
  most amax / 254 of its block (test_cpu_quant.activation_bound), propagated through silu(gate) * up, then
  each act value by amax / 254 of its block. Measured: 1.1-3.0 % off in relative norm; asserted: the bound
  and < 4 %.
Weights: random blocks with finite float16 scales (test_cpu_quant.make_blocks), hidden scaled so that gate
values are ~N(0, 1), where SiLU bends.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize
from test_cpu_quant import IQ_TYPES, TYPES, UNSUPPORTED, activation_bound, make_blocks

from strata.kernels import cpu_quant
from strata.kernels.fused_moe import fused_moe_ref

BUILT = cpu_quant.supports(Q.Q8_0)
pytestmark = pytest.mark.skipif(not BUILT, reason="no C compiler to build the kernel")

# every type but the i-quants with itself, and each of the types before Q2_K / Q3_K with the one three after it in
# their list (block sizes 32 and 256 mixed both ways)
BASE_TYPES = [t for t in TYPES if t not in (Q.Q2_K, Q.Q3_K, *IQ_TYPES)]
COMBOS = [(t, t) for t in TYPES if t not in IQ_TYPES]
COMBOS += [(t, BASE_TYPES[(i + 3) % len(BASE_TYPES)]) for i, t in enumerate(BASE_TYPES)]
# a Q4_K_M file's experts whose down rows 256 does not divide (Qwen4-Exp's 640): llama.cpp's fallbacks
COMBOS += [(Q.Q4_K, Q.Q5_0), (Q.Q4_K, Q.Q8_0)]
# llama.cpp's Q2_K files (down rows Q3_K; Q4_0 where 256 does not divide them), Q3_K_M's (down rows Q4_K / Q5_K),
# and a 32-value w13 before Q2_K's down rows (act quantized per 256 after hidden per 32)
COMBOS += [(Q.Q2_K, Q.Q3_K), (Q.Q2_K, Q.Q4_0), (Q.Q3_K, Q.Q4_K), (Q.Q3_K, Q.Q5_K), (Q.Q8_0, Q.Q2_K)]
# the i-quants: each as w13 and as w2 (each with the next in their list), an IQ2_XXS file's Q2_K down rows, and a
# 32-value w13 before IQ1_M's down rows
COMBOS += [(t, IQ_TYPES[(i + 1) % len(IQ_TYPES)]) for i, t in enumerate(IQ_TYPES)]
COMBOS += [(Q.IQ2_XXS, Q.Q2_K), (Q.Q8_0, Q.IQ1_M)]
# IQ4_NL, llama.cpp's fallback for i-quant and IQ4_XS rows that 256 does not divide: the down rows of an IQ2_XXS,
# an IQ3_S, a Q2_K and an IQ4_XS file's experts (act quantized per 32 after hidden per 256)
COMBOS += [(Q.IQ2_XXS, Q.IQ4_NL), (Q.IQ3_S, Q.IQ4_NL), (Q.Q2_K, Q.IQ4_NL), (Q.IQ4_XS, Q.IQ4_NL)]


@pytest.fixture(autouse=True)
def threads_and_isa(monkeypatch):
    """The kernel on 2 threads, torch on one (the references are many small ops: a pool only costs), and
    the best instruction set again afterwards."""
    monkeypatch.setattr(cpu_quant, "_num_threads", 2)
    torch_threads, best = torch.get_num_threads(), cpu_quant.isa()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(torch_threads)
    cpu_quant.set_isa(best)


def block_of(qtype: Q) -> int:
    return GGML_QUANT_SIZES[qtype][0]


@dataclass(frozen=True)
class Layer:
    """quant_moe's arguments; out0 is out before the call."""
    hidden: torch.Tensor   # [R, D]
    rows: np.ndarray       # [P]
    experts: np.ndarray    # [P]
    weights: np.ndarray    # [P]
    w13: torch.Tensor      # [E, 2I, row bytes]
    qtype13: Q
    w2: torch.Tensor       # [E, D, row bytes]
    qtype2: Q
    inter: int
    out0: torch.Tensor     # [R, D]

    def run(self) -> torch.Tensor:
        out = self.out0.clone()
        cpu_quant.quant_moe(self.hidden, self.rows, self.experts, self.weights, self.w13, self.qtype13, self.w2,
                            self.qtype2, self.inter, out)
        return out

    def ref(self) -> torch.Tensor:  # [R, D] float64
        return self.out0.double() + cpu_quant.quant_moe_ref(self.hidden, self.rows, self.experts, self.weights,
                                                            self.w13, self.qtype13, self.w2, self.qtype2, self.inter)

    @cached_property
    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:  # [E, 2I, D], [E, D, I] float64
        return dequantized(self.w13, self.qtype13, self.hidden.shape[1]), dequantized(self.w2, self.qtype2, self.inter)


def dequantized(w: torch.Tensor, qtype: Q, k: int) -> torch.Tensor:
    """gguf's dequantization of rows of k values, the first bytes of w's rows [..., >= row bytes]."""
    rows = np.ascontiguousarray(w.numpy()[..., :k // block_of(qtype) * GGML_QUANT_SIZES[qtype][1]])
    return torch.from_numpy(dequantize(rows, qtype)).double()


def make_layer(qtype13: Q, qtype2: Q, dim: int, inter: int, num_rows: int, experts: list[int], seed: int) -> Layer:
    """Pairs on `experts` over random rows of hidden; one more expert than used (never read)."""
    rng = np.random.default_rng(seed)
    num_experts = max(experts) + 2
    w13 = make_blocks(qtype13, num_experts * 2 * inter, dim, "random", seed).reshape(num_experts, 2 * inter, -1)
    w2 = make_blocks(qtype2, num_experts * dim, inter, "random", seed + 1).reshape(num_experts, dim, -1)
    gate_rms = float(dequantized(w13[0, :inter], qtype13, dim).square().mean().sqrt())
    hidden = torch.randn(num_rows, dim, generator=torch.Generator().manual_seed(seed)) / (gate_rms * dim ** 0.5)
    pairs = len(experts)
    return Layer(hidden, rng.integers(0, num_rows, pairs), np.array(experts, dtype=np.int64),
                 rng.uniform(0.1, 1.0, pairs).astype(np.float32), w13, qtype13, w2, qtype2, inter,
                 torch.randn(num_rows, dim, generator=torch.Generator().manual_seed(seed + 2)))


def shape_for(qtype13: Q, qtype2: Q) -> tuple[int, int]:
    """(D, I): not multiples of 256 where the types allow it."""
    return (96 if block_of(qtype13) == 32 else 256), (64 if block_of(qtype2) == 32 else 256)


def nine_experts(seed: int) -> list[int]:
    """20 pairs on 9 experts, each used at least once, in no order."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.concatenate([np.arange(9), rng.integers(0, 9, 11)])).tolist()


def silu_product_error(gate, up, gate_err, up_err) -> torch.Tensor:
    """|silu(g') * u' - silu(gate) * up| at most, for |g' - gate| <= gate_err, |u' - up| <= up_err, the
    product and SiLU in float32."""
    silu, up_far = F.silu(gate).abs(), up.abs() + up_err
    return 1.1 * gate_err * up_far + silu * up_err + 1e-6 * (silu + 1.1 * gate_err) * up_far


def requantization_error(act: torch.Tensor, act_err: torch.Tensor, block: int) -> torch.Tensor:
    """|act_hat' - act_hat| at most: act and some act' (|act' - act| <= act_err) quantized at `block`."""
    a, e = act.reshape(-1, block), act_err.reshape(-1, block)
    amax, e_amax = a.abs().amax(-1, keepdim=True), e.amax(-1, keepdim=True)
    step, step_low = amax / 127, (amax - e_amax).clamp(min=0) / 127
    shift = (e + e_amax) / step_low + 1e-4  # how far act' / d' may be from act / d, in steps (+ float32 slack)
    v = a / step
    to_boundary = ((v - v.round()).abs() - 0.5).abs()
    jumps = torch.where(to_boundary <= shift, shift + 1, 0)  # |q' - q| at most (0 in an all-zero block)
    bound = jumps * (step + e_amax / 127) + e_amax + 1e-6 * amax
    return torch.minimum(bound, 2 * amax + e_amax).reshape(act.shape)  # |act_hat| <= amax, |act_hat'| <= amax'


def half_steps(act: torch.Tensor, act_err: torch.Tensor, block: int) -> torch.Tensor:
    """amax' / 254 (x 1.001) of each value's block: how far the kernel's quantized act' is from act'."""
    amax = (act.abs() + act_err).reshape(-1, block).amax(-1, keepdim=True)
    return (1.001 * amax / 254).expand(-1, block).reshape(act.shape)


def error_bound(layer: Layer, against: str) -> torch.Tensor:
    """|out - expected| at most [R, D]; expected = layer.ref() ("ref") or out0 + fused_moe_ref on the
    dequantized weights ("float")."""
    w13, w2 = layer.dequantized
    inter = layer.inter
    bound = torch.zeros(layer.hidden.shape, dtype=torch.float64)
    for expert in np.unique(layer.experts):
        pairs = np.flatnonzero(layer.experts == expert)
        rows = torch.from_numpy(layer.rows[pairs])
        x = layer.hidden[rows].double()  # [n, D]
        if against == "ref":
            x = cpu_quant.quantize_activations_ref(x, block_of(layer.qtype13))
            gate_up_err = 1e-5 * (x.abs() @ w13[expert].abs().T)
        else:  # fused_moe_ref rounds to float32 too: twice the slack
            gate_up_err = activation_bound(x, w13[expert], layer.qtype13) + 2e-5 * (x.abs() @ w13[expert].abs().T)
        gate, up = (x @ w13[expert].T).split(inter, dim=1)  # [n, I] each
        act = F.silu(gate) * up
        act_err = silu_product_error(gate, up, gate_up_err[:, :inter], gate_up_err[:, inter:])
        if against == "ref":
            act_err = requantization_error(act, act_err, block_of(layer.qtype2))
        else:
            act_err = act_err + half_steps(act, act_err, block_of(layer.qtype2))
        weights = torch.from_numpy(layer.weights[pairs]).double().abs()[:, None]
        bound.index_add_(0, rows, weights * ((act_err + 1e-5 * (act.abs() + act_err)) @ w2[expert].abs().T))
    return bound + 1e-5 * layer.out0.abs()


def float_experts(layer: Layer) -> torch.Tensor:
    """out0 + the un-quantized experts: the dequantized weights in float32, fused_moe_ref."""
    w13, w2 = layer.dequantized
    rows = torch.from_numpy(layer.rows)
    y = fused_moe_ref(layer.hidden[rows], w13.float(), w2.float(), torch.from_numpy(layer.experts)[:, None],
                      torch.from_numpy(layer.weights)[:, None])  # [P, D]
    return layer.out0.double().index_add(0, rows, y.double())


def assert_within(out: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> None:
    error = (out.double() - expected).abs()
    assert (error <= bound).all(), f"{int((error > bound).sum())} values off, worst {float((error / bound).max()):.2f}x"


@pytest.mark.parametrize("qtype13,qtype2", COMBOS, ids=[f"{a.name}-{b.name}" for a, b in COMBOS])
def test_matches_reference_and_float_experts(qtype13, qtype2):
    dim, inter = shape_for(qtype13, qtype2)
    layer = make_layer(qtype13, qtype2, dim, inter, num_rows=5, experts=nine_experts(int(qtype13)), seed=int(qtype2))
    out = layer.run()
    assert out.dtype == torch.float32 and out.shape == layer.out0.shape
    assert_within(out, layer.ref(), error_bound(layer, "ref"))
    expected = float_experts(layer)
    assert_within(out, expected, error_bound(layer, "float"))
    change = expected - layer.out0.double()
    assert float((out.double() - expected).norm() / change.norm()) < 0.04


def identity_q8_0(num_experts: int, n: int) -> torch.Tensor:
    """[E, n, row bytes] Q8_0 rows of the n x n identity: d = 1, q = 1 on the diagonal."""
    raw = np.zeros((num_experts, n, n // 32, 34), dtype=np.uint8)
    raw[..., :2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    raw[:, np.arange(n), np.arange(n) // 32, 2 + np.arange(n) % 32] = 1
    return torch.from_numpy(raw.reshape(num_experts, n, -1))


@pytest.mark.parametrize("qtype13", [Q.Q8_0, Q.Q4_K], ids=["Q8_0", "Q4_K"])
def test_act_is_float32_until_quantized(qtype13):
    """W2 = identity, one pair a row: out / weight is the kernel's quantized act, which must be within half a
    step (its block's amax / 254) of silu(gate) * up, plus the float32 slack of gate and up: rounding act
    to bfloat16 first, or a 1 % error in SiLU, breaks this, where the other tests' bound sees them only
    for some types."""
    dim = shape_for(qtype13, Q.Q8_0)[0] * 2
    layer = make_layer(qtype13, Q.Q8_0, dim, dim, num_rows=6, experts=[0, 2, 1, 2, 2, 0], seed=9)
    layer = replace(layer, rows=np.random.default_rng(9).permutation(6), w2=identity_q8_0(layer.w13.shape[0], dim),
                    out0=torch.zeros(6, dim))
    act_hat = layer.run()[layer.rows].double() / torch.from_numpy(layer.weights).double()[:, None]  # [P, I]
    w13 = layer.dequantized[0][layer.experts]  # [P, 2I, D]
    x_hat = cpu_quant.quantize_activations_ref(layer.hidden[layer.rows], block_of(qtype13))
    gate, up = torch.einsum("pnd,pd->pn", w13, x_hat).split(dim, dim=1)
    gate_up_err = 1e-5 * torch.einsum("pnd,pd->pn", w13.abs(), x_hat.abs())
    act = F.silu(gate) * up
    act_err = silu_product_error(gate, up, gate_up_err[:, :dim], gate_up_err[:, dim:])
    assert_within(act_hat, act, half_steps(act, act_err, 32) + act_err + 1e-6 * act.abs())
    assert float((act_hat - act).abs().max()) > 0.1 * float(half_steps(act, act_err, 32).max())  # quantized


LAYOUTS = {  # experts, rows (None: random)
    "one pair": ([4], None), "19 pairs on one expert": ([3] * 19, None),
    "20 pairs on 9 experts": (nine_experts(1), None), "a pair three times": ([2, 5, 2, 2], [1, 0, 1, 1]),
}


@pytest.mark.parametrize("experts,rows", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_pair_layouts(experts, rows):
    """D = 96 (Q8_0), I = 64; 19 pairs of one expert take three row tiles (8, 8, 3)."""
    layer = make_layer(Q.Q8_0, Q.Q4_1, 96, 64, num_rows=4, experts=experts, seed=len(experts))
    if rows is not None:
        layer = replace(layer, rows=np.array(rows, dtype=np.int64))
    assert_within(layer.run(), layer.ref(), error_bound(layer, "ref"))


def test_expert_views_into_larger_buffers():
    """Rows that are the first bytes of longer ones, experts that are slots of a larger pool: the same bits."""
    layer = make_layer(Q.Q4_K, Q.Q6_K, 512, 256, num_rows=3, experts=[0, 2, 1, 2, 0], seed=3)
    views = []
    for w in (layer.w13, layer.w2):
        pool = torch.randint(0, 256, (w.shape[0] + 3, w.shape[1], w.shape[2] + 40), dtype=torch.uint8)
        pool[2:2 + w.shape[0], :, :w.shape[2]] = w
        views.append(pool[2:2 + w.shape[0], :, :w.shape[2]])
    assert not views[0].is_contiguous() and views[0].stride(1) == layer.w13.shape[2] + 40
    strided = replace(layer, w13=views[0], w2=views[1])
    assert torch.equal(strided.run(), layer.run())


def test_thread_count_does_not_change_the_result():
    """200 pairs x 352 values: 352 / (3 threads x 8) leaves a short last chunk of columns. The call is one job whose
    items wait for items claimed before them (a group's rows quantized, its act): 8 threads on this machine's cores
    wait for threads that are not running, and still give the same bits."""
    rng = np.random.default_rng(4)
    layer = make_layer(Q.Q8_0, Q.Q4_0, 352, 352, num_rows=50, experts=rng.integers(0, 5, 200).tolist(), seed=4)
    results = []
    for threads in (1, 2, 3, 8):
        cpu_quant.set_num_threads(threads)
        results.append(layer.run())
    assert all(torch.equal(results[0], r) for r in results[1:])
    assert_within(results[0], layer.ref(), error_bound(layer, "ref"))


@pytest.mark.parametrize("isa", cpu_quant.available_isas() if BUILT else [])
def test_each_instruction_set(isa):
    cpu_quant.set_isa(isa)
    for qtype13, qtype2 in [(Q.Q4_K, Q.Q6_K), (Q.IQ4_XS, Q.Q5_K), (Q.Q4_1, Q.Q8_0), (Q.Q2_K, Q.Q3_K),
                            (Q.IQ2_XXS, Q.IQ3_S), (Q.IQ1_M, Q.IQ2_S), (Q.IQ2_XS, Q.IQ4_NL)]:
        layer = make_layer(qtype13, qtype2, 512, 256, num_rows=3, experts=[1] * 10 + [0], seed=5)
        assert_within(layer.run(), layer.ref(), error_bound(layer, "ref"))


def test_no_pairs_leave_out_as_it_was():
    layer = make_layer(Q.Q4_K, Q.Q6_K, 256, 256, num_rows=2, experts=[0], seed=6)
    empty = np.zeros(0, dtype=np.int64)
    assert torch.equal(replace(layer, rows=empty, experts=empty, weights=np.zeros(0, np.float32)).run(), layer.out0)


def test_supports_every_pair_of_types():
    assert all(cpu_quant.supports_moe(a, b) for a in TYPES for b in TYPES)
    assert not cpu_quant.supports_moe(Q.Q4_K, UNSUPPORTED) and not cpu_quant.supports_moe(Q.F16, Q.Q8_0)


def test_bad_input_says_what_is_wrong():
    layer = make_layer(Q.Q8_0, Q.Q4_K, 96, 256, num_rows=3, experts=[0, 1], seed=7)
    k_layer = make_layer(Q.Q4_K, Q.Q8_0, 256, 64, num_rows=3, experts=[0, 1], seed=8)
    cases = {
        "hidden must be a contiguous CPU float32": replace(layer, hidden=layer.hidden.double()),
        "out must be a contiguous CPU float32": replace(layer, out0=layer.out0[:, :64]),
        r"w13's rows hold 96 values, not a positive multiple of Q4_K's block of 256": replace(layer, qtype13=Q.Q4_K),
        r"w2's rows hold 64 values, not a positive multiple of Q4_K's block": replace(k_layer, qtype2=Q.Q4_K),
        r"w13 must be a CPU uint8 \[E, 512, >= 102\]": replace(layer, w13=layer.w13[:, 1:]),
        r"w2 must be a CPU uint8 \[E, 96, >= 144\]": replace(layer, w2=layer.w2[..., :100]),
        "each row's bytes contiguous": replace(layer, w13=layer.w13.transpose(1, 2).contiguous().transpose(1, 2)),
        "w13 holds 3 experts and w2 2": replace(layer, w2=layer.w2[:2]),
        f"GGUF type {int(UNSUPPORTED)} is not handled": replace(layer, qtype2=UNSUPPORTED),
        "rows must be a contiguous 1-D int64": replace(layer, rows=layer.rows.astype(np.int32)),
        "experts must be a contiguous 1-D int64": replace(layer, experts=np.array([0, 1, 1, 0])[::2]),
        "weights must be a contiguous 1-D float32": replace(layer, weights=layer.weights.astype(np.float64)),
        "weights must be .* one value a pair": replace(layer, weights=layer.weights[:1]),
        r"rows must be in \[0, 3\)": replace(layer, rows=np.array([0, 3], dtype=np.int64)),
        r"experts must be in \[0, 3\), got -1..1": replace(layer, experts=np.array([-1, 1], dtype=np.int64)),
    }
    for message, bad in cases.items():
        with pytest.raises(ValueError, match=message):
            bad.run()
