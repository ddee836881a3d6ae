"""Plain decoder layers chained in one native call (native/dense_stack_cpu.c, in cpu_quant's library): each layer's
RMSNorm, fused qkv product, optional RMSNorm of each query and key head, rotary embedding and KV write (rope_kv),
paged attention (cpu_attention's kernel), o_proj, RMSNorm and SwiGLU MLP, for float32 rows on the CPU with
packed projections that dequant_matmul (or, with int8 activations, quant_matmul) reads. The products, rotary and attention are the same native code as the
per-call path's (their bits); the norms and SiLU are C loops with their own float32 roundings. The model side
(which models fit, what a step hands it) is strata/model/cpu_stack.py."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import torch

from strata.kernels import cpu_attention, cpu_quant

_i64, _f32, _ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
MAX_SEGMENTS = 8  # dense_stack_cpu.c's


class _Weight(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int32), ("int8", ctypes.c_int32), ("qtypes", ctypes.c_int32 * MAX_SEGMENTS),
                ("blocks", _ptr * MAX_SEGMENTS), ("rows", _i64 * MAX_SEGMENTS)]


class _Layer(ctypes.Structure):
    _fields_ = [("norm_in", _ptr), ("norm_post", _ptr), ("q_norm", _ptr), ("k_norm", _ptr), ("qkv", _Weight),
                ("o", _Weight), ("gate_up", _Weight), ("down", _Weight), ("k_cache", _ptr), ("v_cache", _ptr)]


class _Step(ctypes.Structure):
    _fields_ = [(name, _i64) for name in ("tokens", "hidden", "heads", "kv_heads", "dim", "rot_dim", "inter",
                                          "block", "num_slots")] + \
               [("eps", _f32), ("scale", _f32), ("cos_rows", _ptr), ("sin_rows", _ptr), ("slots", _ptr),
                ("tables", _ptr), ("seq_lens", _ptr), ("starts", _ptr), ("width", _i64), ("num_seqs", _i64),
                ("attend", _ptr), ("threads", ctypes.c_int32), ("attention_threads", ctypes.c_int32),
                ("scratch", _ptr)]


Segments = list[tuple[int, torch.Tensor]]  # a weight's row segments: (GGUF type, blocks uint8 [rows, row bytes])


@dataclass
class LayerWeights:
    """One layer as the stack reads it: float32 [hidden] norms ([head_dim] for q_norm / k_norm, None without), the
    projections' row segments: qkv [(H + 2 Hkv) D, hidden], o [hidden, H D], gate_up [2 I, hidden], down [hidden, I],
    and whether they multiply with int8 activations (quant_matmul's products, --cpu-matmul int8) or exactly
    (dequant_matmul's)."""
    norm_in: torch.Tensor
    norm_post: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    qkv: Segments
    o: Segments
    gate_up: Segments
    down: Segments
    int8: bool = False


@dataclass(frozen=True)
class Shapes:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rot_dim: int
    inter: int
    eps: float
    scale: float


def readable(segments: Segments) -> bool:
    """Whether the stack reads a weight of these segments (dequant_matmul's and quant_matmul's types, contiguous, at
    most 8)."""
    return 1 <= len(segments) <= MAX_SEGMENTS and all(
        blocks.is_contiguous() and cpu_quant.supports_dequant(qtype) for qtype, blocks in segments)


def available() -> bool:
    """The native library (with the attention kernel) is built here."""
    return cpu_attention.available()


def _weight(segments: Segments, int8: bool) -> _Weight:
    out = _Weight(count=len(segments), int8=int8)
    for s, (qtype, blocks) in enumerate(segments):
        out.qtypes[s], out.blocks[s], out.rows[s] = int(qtype), blocks.data_ptr(), blocks.shape[0]
    return out


class NativeStack:
    """Layers handed to the C side once (their tensors kept alive here); `run` takes one step through all."""

    def __init__(self, layers: list[LayerWeights], shapes: Shapes) -> None:
        for layer in layers:
            if not all(readable(w) for w in (layer.qkv, layer.o, layer.gate_up, layer.down)):
                raise ValueError("NativeStack: a projection the stack does not read (check `readable` first)")
        self.weights, self.shapes = layers, shapes
        self.layers = (_Layer * len(layers))(*(
            _Layer(layer.norm_in.data_ptr(), layer.norm_post.data_ptr(),
                   layer.q_norm.data_ptr() if layer.q_norm is not None else None,
                   layer.k_norm.data_ptr() if layer.k_norm is not None else None,
                   *(_weight(w, layer.int8) for w in (layer.qkv, layer.o, layer.gate_up, layer.down)))
            for layer in layers))
        self.addresses: tuple = ()  # the KV pool's K and V addresses self.layers holds
        self.step = _Step(hidden=shapes.hidden, heads=shapes.heads, kv_heads=shapes.kv_heads, dim=shapes.head_dim,
                          rot_dim=shapes.rot_dim, inter=shapes.inter, eps=shapes.eps, scale=shapes.scale)
        self.run_stack = cpu_quant._require().strata_dense_stack_f32
        self.attend = ctypes.cast(cpu_attention._kernel(), _ptr).value

    def run(self, hidden: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]], cos_rows: torch.Tensor,
            sin_rows: torch.Tensor, slots: torch.Tensor, tables: torch.Tensor, seq_lens: torch.Tensor,
            starts: torch.Tensor, context_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [T, D] float32 (the embeddings) through every layer -> (the last layer's MLP output, the residual
        before it). caches: each layer's float32 (K, V) pool [N_blocks, B, Hkv, D]; cos_rows / sin_rows [T, ...,
        rot_dim] (RotaryEmbedding.rows'); slots [T]; tables [S, W], seq_lens [S], starts [S + 1] as the paged
        attention takes them; context_tokens: sum(seq_lens) (sizes the attention's threads)."""
        addresses = tuple(k.data_ptr() for k, _ in caches) + tuple(v.data_ptr() for _, v in caches)
        if addresses != self.addresses:  # a new pool (first step, or resized): its pointers
            for layer, (k_cache, v_cache) in zip(self.layers, caches):
                layer.k_cache, layer.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
            self.addresses = addresses
        tokens, step, k_cache = hidden.shape[0], self.step, caches[0][0]
        # int64 rows read in place (the step's own: no copy where they are so already)
        slots, tables, seq_lens, starts = (t.to(torch.int64).contiguous() for t in (slots, tables, seq_lens, starts))
        cos_rows, sin_rows = cos_rows.contiguous(), sin_rows.contiguous()
        hd, nqkv = step.heads * step.dim, (step.heads + 2 * step.kv_heads) * step.dim
        scratch = np.empty(tokens * (step.hidden + max(nqkv, 3 * step.inter) + 2 * hd), np.float32)
        step.tokens, step.block, step.num_slots = tokens, k_cache.shape[1], k_cache.shape[0] * k_cache.shape[1]
        step.cos_rows, step.sin_rows, step.slots = cos_rows.data_ptr(), sin_rows.data_ptr(), slots.data_ptr()
        step.tables, step.width, step.num_seqs = tables.data_ptr(), tables.shape[1], seq_lens.shape[0]
        step.seq_lens, step.starts = seq_lens.data_ptr(), starts.data_ptr()
        step.attend, step.threads = self.attend, cpu_quant._threads()
        step.attention_threads = 1 if context_tokens * hd < cpu_attention._ONE_THREAD_WORK else step.threads
        step.scratch = scratch.ctypes.data
        hidden = hidden.contiguous().clone()
        residual = torch.from_numpy(np.empty((tokens, step.hidden), np.float32))
        status = self.run_stack(ctypes.byref(step), self.layers, len(self.layers), 1, hidden.data_ptr(),
                                residual.data_ptr())
        if status != 0:
            raise RuntimeError(f"the native CPU layer stack refused a step ({status}: 1 shapes, 2 a weight, 3 a KV "
                               f"slot outside the pool, 4 the attention)")
        return hidden, residual
