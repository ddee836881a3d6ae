"""A layer weight kept as GGUF blocks (DESIGN §5 "Weights stay in their file's format").

`PackedWeight` is the one such abstraction: a logical weight [N, K] (N rows of K values each) stored as
row segments, each a uint8 tensor [rows, row_bytes] of one GGUF block type, in the file's layout and
possibly a zero-copy view of its mmap. A fused projection (qkv, gate/up) keeps one segment per checkpoint
part, so no bytes move to join them and parts of different types stay exact (llama.cpp's Q4_K_M stores
some attn_v as Q6_K beside a Q4_K attn_q). Where a checkpoint's row order interleaves parts of different types
(Qwen3-Next's in_proj_qkvz from a Q4_K_M file's Q5_K attn_qkv and Q4_K attn_gate), the rows stay in the file's
order and products gather their columns (`reordered`). It is a module, so `model.to(device)` moves its bytes.
Layers compute with it only through ops.packed_linear / ops.packed_embedding; `dequantize` serves
loading fallbacks and tests.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from strata.config import debug_value
from strata.kernels.gguf_blocks import dequantize_ref
from strata.model import ops

# Checkpoint tensors that may load packed: weights of layers called as modules (nn.Linear, nn.Embedding):
# attention and linear-attention projections, dense and shared-expert MLPs, the MTP head's fc, the
# embedding and the LM head. Not the MoE router (the fused routing kernel reads its weight as a tensor).
_PACKED_NAMES = re.compile(r"(self_attn\.[qkvo]_proj|mlp\.(shared_expert\.)?(gate|up|down)_proj|"
                           r"linear_attn\.(in_proj_qkvz|in_proj_ba|in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)|"
                           r"mtp\.fc|embed_tokens|ple_embedding\.ngram_embedding|lm_head)\.weight$")
# The routed experts, stacked per layer: they load as PackedExpertWeights
_PACKED_EXPERT_NAMES = re.compile(r"mlp\.experts\.(gate_up_proj|down_proj)$")
# Qwen4-Exp's hyper-connection mixers (~630M parameters of the 125B: 2.5 GB a token in float32 on the CPU, 0.4 GB
# as a Q4_K_M file's blocks) and its PLE layer's key / value projections load packed, but a model on CUDA
# dequantizes them after loading (loader.build_model), as it always did: the mixers' fused two-launch kernel
# (kernels/hyper.py) reads dense rows, where packed GEMVs would take a dozen launches a mixer
_DENSE_ON_GPU_NAMES = re.compile(r"(hyper_connection(_mixer)?\.(input_mix_weight_down|input_mix_weight_up|"
                                 r"block_inject_weight)|ple\.(key_proj|value_proj))\.weight$")


def keeps_packed(checkpoint_name: str) -> bool:
    """Whether the HF checkpoint tensor `checkpoint_name` may be given to the model as a PackedWeight."""
    return _PACKED_NAMES.search(checkpoint_name) is not None or _DENSE_ON_GPU_NAMES.search(checkpoint_name) is not None


def dense_on_gpu(checkpoint_name: str) -> bool:
    """Whether a weight that loads packed is dequantized where the model runs on CUDA (module name + ".weight" or
    its checkpoint name). STRATA_DENSE_MIXERS=0 keeps them packed there too (ops.packed_linear's GEMVs: ~0.9 GB
    less VRAM for the 125B's mixers at Q4_K_M, more launches a step, and the LM head's mixer rounds by its step's
    row count, where ops.hyper_mix's rows_alike does not; an experiment: Qwen4-Exp 4L Q4_K_M at one stream on an
    H100 774 tok/s against the default's 1,163, bench/results/2026-12-07-h100-session73)."""
    return _DENSE_ON_GPU_NAMES.search(checkpoint_name) is not None and debug_value("DENSE_MIXERS") != "0"


def is_packed_expert_stack(checkpoint_name: str) -> bool:
    """Whether `checkpoint_name` is a layer's stacked routed experts, which may load as a PackedExpertWeight."""
    return _PACKED_EXPERT_NAMES.search(checkpoint_name) is not None


class PackedWeight(nn.Module):
    def __init__(self, blocks: torch.Tensor, qtype: int, in_features: int) -> None:
        """One segment: blocks uint8 [N, row_bytes], GGUF rows of `qtype` with `in_features` values each."""
        super().__init__()
        if blocks.dtype != torch.uint8 or blocks.dim() != 2:
            raise ValueError(f"packed blocks are a uint8 [rows, row_bytes] tensor, got {blocks.dtype} "
                             f"{tuple(blocks.shape)}")
        self.in_features = in_features
        self.qtypes: list[int] = []
        # rows kept in the file's order with a gather of the product's columns (`reordered`): a plain flag for
        # the CPU path's few hundred calls a token, the order [N] itself a buffer (moved with the blocks)
        self.reorders = False
        self.register_buffer("output_order", None, persistent=False)
        # float32 products on the CPU: int8-quantized activations (True) or exact float32 (set_cpu_matmul)
        self.int8_activations = False
        # what ops.packed_linear keeps for the CPU's one-call product of several segments (cpu_quant.Segments);
        # dropped whenever the segments change or move
        self.cpu_segments = None
        self._add_segment(blocks, qtype)

    def _add_segment(self, blocks: torch.Tensor, qtype: int) -> None:
        # buffers, not plain attributes: Module.to / .cuda() move them (not persistent: no state_dict entry)
        self.register_buffer(f"blocks{len(self.qtypes)}", blocks, persistent=False)
        self.qtypes.append(int(qtype))
        self.cpu_segments = None

    def _apply(self, fn, recurse: bool = True):
        self.cpu_segments = None  # the buffers may move
        return super()._apply(fn, recurse)

    @classmethod
    def cat_rows(cls, parts: Sequence[PackedWeight]) -> PackedWeight:
        """The rows of `parts` one after the other, as their segments (no bytes copied; one part: itself)."""
        if len({p.in_features for p in parts}) != 1:
            raise ValueError(f"packed parts of different row lengths: {[tuple(p.shape) for p in parts]}")
        if len(parts) == 1:
            return parts[0]
        if any(p.reorders for p in parts):
            raise ValueError("packed parts whose rows are reordered cannot be joined")
        return cls._of_segments([segment for part in parts for segment in part.segments()], parts[0].in_features)

    @classmethod
    def _of_segments(cls, segments: Sequence[tuple[int, torch.Tensor]], in_features: int) -> PackedWeight:
        """A weight of (qtype, blocks) row segments, in order."""
        weight = cls(segments[0][1], segments[0][0], in_features)
        for qtype, blocks in segments[1:]:
            weight._add_segment(blocks, qtype)
        return weight

    def with_runs_joined(self) -> PackedWeight:
        """This weight with each run of adjacent segments of one type joined into one (a copy of those rows):
        on the GPU, where the bytes were copied anyway, a fused projection whose parts share a type (Q4_K_M's
        attn_q and attn_k, a shared expert's gate and up) is then one kernel launch instead of one a part."""
        runs = [(qtype, [blocks for _, blocks in run])
                for qtype, run in itertools.groupby(self.segments(), key=lambda segment: segment[0])]
        if len(runs) == len(self.qtypes):
            return self
        joined = [(qtype, torch.cat(parts) if len(parts) > 1 else parts[0]) for qtype, parts in runs]
        weight = PackedWeight._of_segments(joined, self.in_features)
        weight.int8_activations = self.int8_activations
        if self.reorders:
            weight.reorders, weight.output_order = True, self.output_order
        return weight

    def reordered(self, order: torch.Tensor) -> PackedWeight:
        """This weight with rows `order` [N] (indices into its rows), its segments kept as they are (no copy):
        a product computes over the stored rows, then gathers its columns in `order` (ops.packed_linear). For
        parts of different types that a row order interleaves (Qwen3-Next's in_proj_qkvz from a Q4_K_M file's
        Q5_K attn_qkv and Q4_K attn_gate), which take_rows cannot make one segment of."""
        if order.shape != (self.shape[0],):
            raise ValueError(f"a row order of {tuple(order.shape)} for a weight of {self.shape[0]} rows")
        weight = PackedWeight._of_segments(self.segments(), self.in_features)
        weight.int8_activations = self.int8_activations
        weight.reorders = True
        weight.output_order = (order if not self.reorders else self.output_order[order]).to(self.device, torch.long)
        return weight

    def take_rows(self, order: torch.Tensor) -> PackedWeight:
        """Rows `order` [M] of this weight as one new segment (a copy): llama.cpp's row permutations undone."""
        if len(set(self.qtypes)) != 1 or self.reorders:
            names = ", ".join(str(q) for q in self.qtypes)
            raise ValueError(f"cannot copy rows across segments of different types ({names}) or of a reordered "
                             f"weight: use reordered")
        blocks = torch.cat([b for _, b in self.segments()]) if len(self.qtypes) > 1 else self.blocks0
        return PackedWeight(blocks.index_select(0, order.to(blocks.device)), self.qtypes[0], self.in_features)

    def segments(self) -> list[tuple[int, torch.Tensor]]:
        """(qtype, blocks uint8 [rows, row_bytes]) per row segment, in row order."""
        buffers = self._buffers  # (not Module.__getattr__: the CPU path asks a few hundred times a token)
        return [(qtype, buffers[f"blocks{i}"]) for i, qtype in enumerate(self.qtypes)]

    @property
    def qtype(self) -> int:
        """The block type of a weight with one segment."""
        return self._single()[0]

    @property
    def blocks(self) -> torch.Tensor:
        """uint8 [N, row_bytes] of a weight with one segment."""
        return self._single()[1]

    def _single(self) -> tuple[int, torch.Tensor]:
        if len(self.qtypes) != 1:
            raise ValueError(f"this packed weight has {len(self.qtypes)} segments; use segments()")
        return self.segments()[0]

    @property
    def shape(self) -> torch.Size:
        return torch.Size((sum(b.shape[0] for _, b in self.segments()), self.in_features))

    @property
    def nbytes(self) -> int:
        return sum(b.numel() for _, b in self.segments())

    @property
    def device(self) -> torch.device:
        return self.blocks0.device

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight as a dense tensor [N, K] in `dtype` (exactly gguf's dequantization, then the cast)."""
        dense = torch.cat([dequantize_ref(b, q, self.in_features).to(dtype) for q, b in self.segments()])
        return dense.index_select(0, self.output_order.to(dense.device)) if self.reorders else dense

    def dense_float32(self) -> torch.Tensor:
        """dequantize(float32), made at the first call and kept: the fallback of float32 models on the CPU
        where the native dequant_matmul (which reads these blocks as they are, to the same weights) is
        unavailable: no C compiler, a type it lacks, or STRATA_NO_CPU_DEQUANT=1. It costs what loading
        dense weights cost (4 bytes a weight, ~7x a 4-bit file), so nothing calls it otherwise."""
        dense = getattr(self, "_dense_float32", None)
        if dense is None:
            dense = self._dense_float32 = self.dequantize(torch.float32)
        return dense

    def extra_repr(self) -> str:
        from gguf import GGMLQuantizationType

        names = "+".join(GGMLQuantizationType(q).name for q in self.qtypes)
        reordered = ", rows reordered" if self.reorders else ""
        return f"shape={tuple(self.shape)}, {names}, {self.nbytes / 2**20:.2f} MiB{reordered}"


class PackedEmbedding(nn.Module):
    """nn.Embedding over a PackedWeight [V, D]: the ids' rows are gathered as blocks, then dequantized."""

    def __init__(self, weight: PackedWeight, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = weight
        self.dtype = dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return ops.packed_embedding(self.weight, input_ids, self.dtype)  # [T, D]


class PackedExpertWeight:
    """A layer's stacked routed-expert weight [E, N, K] as GGUF blocks: uint8 [E, N, row_bytes] of one type
    (a view of the file's mmap as loaded). What a weight source yields for `mlp.experts.gate_up_proj`
    (gate rows, then up rows) and `mlp.experts.down_proj`; the model keeps it as ExpertBlocks."""

    def __init__(self, blocks: torch.Tensor, qtype: int, in_features: int) -> None:
        if blocks.dtype != torch.uint8 or blocks.dim() != 3:
            raise ValueError(f"packed expert blocks are a uint8 [experts, rows, row_bytes] tensor, got "
                             f"{blocks.dtype} {tuple(blocks.shape)}")
        self.blocks, self.qtype, self.in_features = blocks, int(qtype), in_features

    @classmethod
    def cat_rows(cls, parts: Sequence[PackedExpertWeight]) -> PackedExpertWeight:
        """Each expert's rows of `parts` one after the other ([E, I, .] x 2 -> [E, 2I, .]: gate then up);
        the parts must share type and row length. A copy."""
        if len({(p.qtype, p.in_features) for p in parts}) != 1:
            raise ValueError("packed expert parts of different types or row lengths cannot be joined")
        return cls(torch.cat([p.blocks for p in parts], dim=1), parts[0].qtype, parts[0].in_features)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.blocks.shape[:2], self.in_features))

    @property
    def nbytes(self) -> int:
        return self.blocks.numel()

    def dim(self) -> int:
        return 3

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[E, N, K] in `dtype` (gguf's dequantization, then the cast)."""
        num_experts, rows, _ = self.shape
        flat = dequantize_ref(self.blocks.reshape(num_experts * rows, -1), self.qtype, self.in_features)
        return flat.to(dtype).view(num_experts, rows, self.in_features)


class ExpertBlocks(NamedTuple):
    """One MoE layer's routed experts as GGUF blocks, as kernels read them: w13 uint8 [E, 2I, rb13] (rows of
    D values of type qtype13: gate rows, then up rows), w2 uint8 [E, D, rb2] (rows of I values of type
    qtype2). Rows are contiguous bytes; an expert's rows follow each other, but experts may lie further
    apart than their size (device slots sized for the layer with the largest experts): w13.stride(0)."""

    w13: torch.Tensor
    qtype13: int
    w2: torch.Tensor
    qtype2: int

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def inter(self) -> int:
        return self.w13.shape[1] // 2

    @property
    def hidden_size(self) -> int:
        return self.w2.shape[1]

    @property
    def expert_bytes(self) -> int:
        """Packed bytes of one expert (its w13 and w2 rows)."""
        return self.w13[0].numel() + self.w2[0].numel()


def packed_bytes_by_type(model: nn.Module) -> dict[int, int]:
    """qtype -> packed bytes of `model`'s weights of that type: its PackedWeights' segments (each module once)
    and its packed routed experts (w13 and w2)."""
    totals: dict[int, int] = {}
    for module in model.modules():
        if isinstance(module, PackedWeight):
            parts = [(qtype, blocks.numel()) for qtype, blocks in module.segments()]
        elif all(hasattr(module, name) for name in ("qtype13", "qtype2", "w13", "w2")):  # moe.PackedLocalExperts
            parts = [(module.qtype13, module.w13.numel()), (module.qtype2, module.w2.numel())]
        else:
            continue
        for qtype, nbytes in parts:
            totals[qtype] = totals.get(qtype, 0) + nbytes
    return totals


def resolve_cpu_matmul(model: nn.Module, mode: str, bytes_by_type: dict[int, int] | None = None) -> str:
    """--cpu-matmul's "auto" made "int8" or "exact" for `model`: int8 where most of its weight bytes (bytes_by_type,
    qtype -> bytes: the file's multiplied tensors' where the caller has it, else the model's packed weights) are of
    types whose exact float decode bounds the CPU's products (ops.exact_decode_is_slow: the K-quants and i-quants),
    else exact (the 32-value block types: about as fast exact). Other modes as given."""
    if mode != "auto":
        return mode
    totals = packed_bytes_by_type(model) if bytes_by_type is None else bytes_by_type
    superblocks = sum(nbytes for qtype, nbytes in totals.items() if ops.exact_decode_is_slow(qtype))
    return "int8" if 2 * superblocks > sum(totals.values()) else "exact"


def set_cpu_matmul(model: nn.Module, mode: str, bytes_by_type: dict[int, int] | None = None) -> str:
    """--cpu-matmul for every packed weight of `model`: "int8" quantizes a float32 model's activations per
    block for its CPU products (ops.packed_linear), "exact" keeps them float32, "auto" picks one of the two
    (resolve_cpu_matmul, by bytes_by_type where given). Returns the mode set."""
    mode = resolve_cpu_matmul(model, mode, bytes_by_type)
    for module in model.modules():
        if isinstance(module, PackedWeight) or hasattr(module, "int8_activations"):  # (moe.PackedLocalExperts too)
            module.int8_activations = mode == "int8"
    if hasattr(model, "forget_cpu_stack"):  # the native CPU stack holds each weight's product mode
        model.forget_cpu_stack()
    return mode
