"""A float32 CPU model's plain decoder layers in one native call per short-window step (kernels/cpu_stack.py).

The per-module path spends ~10 torch and Python calls a layer around its native products, rotary and
attention: ~14 of a ~37 ms step of the bundled SmolLM2 at 8 streams on the 2-core VM. `DenseStack` hands
the native side every layer's weights once and each step's layout once, and it runs the stack with the same
native products, rotary and attention (their bits); only the RMSNorms' sums and SiLU's exp round their own
way (a few float32 ulps from torch's). It takes a step when every layer is Llama's or Qwen3's (attention without
output gate or bias, with or without qk-norm; a dense SwiGLU MLP; plain RMSNorms of one eps), every projection is
packed blocks the native products read (exactly, or with --cpu-matmul int8's activations, as the per-module path
multiplies them), the KV pool is float32 with nothing in a host tier, and the step's windows are at most
STACK_MAX_QUERY_LEN tokens (decode, verification, short prompts and prompt chunks). STRATA_NO_CPU_STACK=1 keeps the
per-module path.

Short prompts pay: the bundled model's prompt step of 8 prompts of 64 tokens took 0.57-0.72 s on the stack against
0.69-1.21 s per module on the 2-core VM (~0.2 s of torch calls around the products). Long ones do not: the native
attention works one (sequence, KV head) at a time with scalar exponentials, so a lone 1,024-token prompt ran at
272-325 tok/s on the stack against 417-449 with torch's attention (bench/results/2026-12-07-cpu-session66/).
"""

from __future__ import annotations

import torch

from strata.config import debug_flag
from strata.model import cpu_ops
from strata.model.attention import Attention
from strata.model.context import ForwardContext
from strata.model.mlp import DenseMLP
from strata.model.packed import PackedWeight

STACK_MAX_QUERY_LEN = 64  # longer windows (prompt chunks) keep the layers: see above


def _segments(linear, int8: bool):
    """A packed projection's row segments where the stack reads them in the layer's mode (`int8`: --cpu-matmul
    int8's products), else None."""
    weight = linear.weight
    if not isinstance(weight, PackedWeight) or linear.bias is not None or weight.reorders or \
            weight.int8_activations != int8:
        return None
    segments = weight.segments()
    return segments if cpu_ops.native_stack().readable(segments) else None


class DenseStack:
    """A model's layers on the native stack (build with `of`)."""

    def __init__(self, model, native) -> None:
        self.attention = model.model.layers[0].self_attn  # its rotary rows and KV pool stand for every layer's
        self.native = native

    @classmethod
    def of(cls, model) -> DenseStack | None:
        """The stack for `model`'s layers (on the CPU), or None where one of them is not a plain Llama or Qwen3 layer
        on packed weights of one product mode, or the native library is not built here."""
        kernels = cpu_ops.native_stack()
        if kernels is None or debug_flag("NO_CPU_STACK") or model.stage is not None:
            return None
        layers, first = [], model.model.layers[0]
        eps = first.input_layernorm.eps
        for layer in model.model.layers:
            attention, mlp = getattr(layer, "self_attn", None), layer.mlp
            if type(attention) is not Attention or attention.gated or type(mlp) is not DenseMLP or \
                    attention.rotary.config != first.self_attn.rotary.config:
                return None
            head_norms = (attention.q_norm, attention.k_norm) if attention.q_norm is not None else ()
            norms = (layer.input_layernorm, layer.post_attention_layernorm, *head_norms)
            if any(n.zero_centered or n.eps != eps or n.weight.dtype != torch.float32 for n in norms):
                return None
            int8 = getattr(attention.qkv_proj.weight, "int8_activations", False)
            weights = [_segments(p, int8) for p in (attention.qkv_proj, attention.o_proj, mlp.gate_up_proj,
                                                    mlp.down_proj)]
            if any(w is None for w in weights):
                return None
            q_norm, k_norm = (n.weight.detach().contiguous() for n in head_norms) if head_norms else (None, None)
            layers.append(kernels.LayerWeights(layer.input_layernorm.weight.detach().contiguous(),
                                               layer.post_attention_layernorm.weight.detach().contiguous(),
                                               q_norm, k_norm, *weights, int8=int8))
        attention, mlp = first.self_attn, first.mlp
        shapes = kernels.Shapes(hidden=model.config.hidden_size, heads=attention.num_heads,
                                kv_heads=attention.num_kv_heads, head_dim=attention.head_dim,
                                rot_dim=attention.rotary.rot_dim, inter=mlp.down_proj.in_features, eps=eps,
                                scale=attention.scale)
        return cls(model, kernels.NativeStack(layers, shapes))

    def takes(self, ctx: ForwardContext) -> bool:
        """Whether this step runs on the stack: windows of up to STACK_MAX_QUERY_LEN tokens over a float32 KV pool
        without scales or host blocks (the caller checks that the rows are float32 on the CPU: ops.native_cpu_rows)."""
        if ctx.max_query_len > STACK_MAX_QUERY_LEN or ctx.has_host_blocks or ctx.kv_staging is not None or \
                ctx.host_kv_caches is not None:
            return False
        k_cache, v_cache, kv_scales = self.attention.kv_cache(ctx)
        return kv_scales is None and k_cache.dtype == torch.float32 and k_cache.is_contiguous() and \
            v_cache.is_contiguous()

    def run(self, hidden: torch.Tensor, ctx: ForwardContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The embeddings [T, D] -> (the last layer's MLP output, the residual before it), as the layers give."""
        caches = [ctx.kv_caches[layer_idx] for layer_idx in range(len(self.native.weights))]
        step_rows = ctx.scratch.rope_rows.setdefault(self.attention.rotary.config, {})
        cos_rows, sin_rows = self.attention.rotary.rows(ctx.positions, step_rows)
        return self.native.run(hidden, caches, cos_rows, sin_rows, ctx.slot_mapping, ctx.block_tables, ctx.seq_lens,
                               ctx.query_start_loc, sum(ctx.num_computed) + sum(ctx.query_lens))
