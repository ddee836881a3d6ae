"""A float32 CPU model's plain decoder layers in one native call per decode step (native/dense_stack_cpu.c).

The per-module path spends ~10 torch and Python calls a layer around its native products, rotary and
attention: ~14 of a ~37 ms step of the bundled SmolLM2 at 8 streams on the 2-core VM. `DenseStack` hands
the C side every layer's weights once and each step's layout once, and it runs the stack with the same
native products, rotary and attention (their bits); only the RMSNorms' sums and SiLU's exp round their own
way (a few float32 ulps from torch's). It takes a step when every layer is Llama's or Qwen3's (attention without
output gate or bias, with or without qk-norm; a dense SwiGLU MLP; plain RMSNorms of one eps), every projection is packed blocks that
dequant_matmul reads exactly (not --cpu-matmul int8), the KV pool is float32 with nothing in a host tier, and
the step's windows are short (decode, verification). STRATA_NO_CPU_STACK=1 keeps the per-module path.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from strata.config import debug_flag
from strata.kernels import cpu_attention, cpu_quant
from strata.model.attention import BATCHED_MAX_QUERY_LEN, Attention
from strata.model.context import ForwardContext
from strata.model.mlp import DenseMLP
from strata.model.packed import PackedWeight

_i64, _f32, _ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
MAX_SEGMENTS = 8  # dense_stack_cpu.c's


class _Weight(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int32), ("qtypes", ctypes.c_int32 * MAX_SEGMENTS),
                ("blocks", _ptr * MAX_SEGMENTS), ("rows", _i64 * MAX_SEGMENTS)]


class _Layer(ctypes.Structure):
    _fields_ = [("norm_in", _ptr), ("norm_post", _ptr), ("q_norm", _ptr), ("k_norm", _ptr), ("qkv", _Weight), ("o", _Weight), ("gate_up", _Weight),
                ("down", _Weight), ("k_cache", _ptr), ("v_cache", _ptr)]


class _Step(ctypes.Structure):
    _fields_ = [(name, _i64) for name in ("tokens", "hidden", "heads", "kv_heads", "dim", "rot_dim", "inter",
                                          "block", "num_slots")] + \
               [("eps", _f32), ("scale", _f32), ("cos_rows", _ptr), ("sin_rows", _ptr), ("slots", _ptr),
                ("tables", _ptr), ("seq_lens", _ptr), ("starts", _ptr), ("width", _i64), ("num_seqs", _i64),
                ("attend", _ptr), ("threads", ctypes.c_int32), ("attention_threads", ctypes.c_int32),
                ("scratch", _ptr)]


def _weight(linear) -> _Weight | None:
    """A packed projection's segments as the C side takes them, or None where the stack cannot read it."""
    weight = linear.weight
    if not isinstance(weight, PackedWeight) or linear.bias is not None or weight.reorders or \
            weight.int8_activations or not all(cpu_quant.supports(qtype) for qtype in weight.qtypes):
        return None
    segments = weight.segments()
    if not 1 <= len(segments) <= MAX_SEGMENTS or not all(blocks.is_contiguous() for _, blocks in segments):
        return None
    out = _Weight(count=len(segments))
    for s, (qtype, blocks) in enumerate(segments):
        out.qtypes[s], out.blocks[s], out.rows[s] = int(qtype), blocks.data_ptr(), blocks.shape[0]
    return out


class DenseStack:
    """A model's layers for the native stack (build with `of`)."""

    def __init__(self, model, layers: list[_Layer], keep: list[torch.Tensor]) -> None:
        first = model.model.layers[0]
        attention, mlp = first.self_attn, first.mlp
        self.attention = attention  # its rotary rows and KV pool keys stand for every layer's
        self.layers = (_Layer * len(layers))(*layers)
        self.keep = keep  # the norms' float32 copies the C side reads
        self.addresses: tuple = ()  # the KV pool's K and V addresses self.layers holds
        self.step = _Step(hidden=model.config.hidden_size, heads=attention.num_heads, kv_heads=attention.num_kv_heads,
                          dim=attention.head_dim, rot_dim=attention.rotary.rot_dim,
                          inter=mlp.down_proj.in_features, eps=first.input_layernorm.eps, scale=attention.scale)
        self.run_stack = cpu_quant._require().strata_dense_stack_f32
        self.attend = ctypes.cast(cpu_attention._kernel(), _ptr).value

    @classmethod
    def of(cls, model) -> DenseStack | None:
        """The stack for `model`'s layers, or None where one of them is not a plain Llama layer on packed
        float32 weights (or the native library is not built here)."""
        if debug_flag("NO_CPU_STACK") or not cpu_attention.available() or model.stage is not None:
            return None
        layers, keep, first = [], [], model.model.layers[0]
        for layer in model.model.layers:
            attention, mlp = getattr(layer, "self_attn", None), layer.mlp
            if type(attention) is not Attention or attention.gated or type(mlp) is not DenseMLP or \
                    attention.rotary.config != first.self_attn.rotary.config:
                return None
            norms = [layer.input_layernorm, layer.post_attention_layernorm]
            if attention.q_norm is not None:
                norms += [attention.q_norm, attention.k_norm]
            if any(n.zero_centered or n.eps != first.input_layernorm.eps or n.weight.dtype != torch.float32
                   or n.weight.is_cuda for n in norms):
                return None
            weights = [_weight(p) for p in (attention.qkv_proj, attention.o_proj, mlp.gate_up_proj, mlp.down_proj)]
            if any(w is None for w in weights):
                return None
            norm_weights = [n.weight.detach().contiguous() for n in norms]
            keep += norm_weights
            pointers = [w.data_ptr() for w in norm_weights] + [None] * (4 - len(norm_weights))
            layers.append(_Layer(*pointers, *weights))
        return cls(model, layers, keep)

    def takes(self, hidden: torch.Tensor, ctx: ForwardContext) -> bool:
        """Whether this step runs on the stack: float32 CPU rows of short windows, a float32 KV pool without
        scales or host blocks."""
        if hidden.is_cuda or hidden.dtype != torch.float32 or ctx.max_query_len > BATCHED_MAX_QUERY_LEN or \
                ctx.has_host_blocks or ctx.kv_staging is not None or ctx.host_kv_caches is not None:
            return False
        k_cache, v_cache, kv_scales = self.attention.kv_cache(ctx)
        return kv_scales is None and k_cache.dtype == torch.float32 and k_cache.is_contiguous() and \
            v_cache.is_contiguous()

    def run(self, hidden: torch.Tensor, ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The embeddings [T, D] -> (the last layer's MLP output, the residual before it), as the layers give."""
        caches = [ctx.kv_caches[layer_idx] for layer_idx in range(len(self.layers))]
        addresses = tuple(k.data_ptr() for k, _ in caches) + tuple(v.data_ptr() for _, v in caches)
        if addresses != self.addresses:  # a new pool (first step, or resized): its pointers
            for layer, (k_cache, v_cache) in zip(self.layers, caches):
                layer.k_cache, layer.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
            self.addresses = addresses
        tokens, step = hidden.shape[0], self.step
        step_rows = ctx.scratch.rope_rows.setdefault(self.attention.rotary.config, {})
        cos_rows, sin_rows = (rows.contiguous() for rows in self.attention.rotary.rows(ctx.positions, step_rows))
        # int64 rows the C side reads in place (the step's own: no copy where they are so already)
        slots, tables, seq_lens, starts = (t.to(torch.int64).contiguous() for t in (
            ctx.slot_mapping, ctx.block_tables, ctx.seq_lens, ctx.query_start_loc))
        k_cache = caches[0][0]
        hd, nqkv = step.heads * step.dim, (step.heads + 2 * step.kv_heads) * step.dim
        scratch = np.empty(tokens * (step.hidden + max(nqkv, 3 * step.inter) + 2 * hd), np.float32)
        context = sum(ctx.num_computed) + sum(ctx.query_lens)
        step.tokens, step.block, step.num_slots = tokens, k_cache.shape[1], k_cache.shape[0] * k_cache.shape[1]
        step.cos_rows, step.sin_rows, step.slots = cos_rows.data_ptr(), sin_rows.data_ptr(), slots.data_ptr()
        step.tables, step.width = tables.data_ptr(), tables.shape[1]
        step.seq_lens, step.starts, step.num_seqs = seq_lens.data_ptr(), starts.data_ptr(), ctx.num_seqs
        step.attend, step.threads = self.attend, cpu_quant._threads()
        step.attention_threads = 1 if context * hd < cpu_attention._ONE_THREAD_WORK else step.threads
        step.scratch = scratch.ctypes.data
        hidden = hidden.contiguous().clone()
        residual = torch.from_numpy(np.empty((tokens, step.hidden), np.float32))
        status = self.run_stack(ctypes.byref(step), self.layers, len(self.layers), 1, hidden.data_ptr(),
                                residual.data_ptr())
        if status != 0:
            raise RuntimeError(f"the native CPU layer stack refused a step ({status}: 1 shapes, 2 a weight, 3 a KV "
                               f"slot outside the pool, 4 the attention)")
        return hidden, residual
