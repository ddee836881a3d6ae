"""The bytes a GGUF model's weights take once loaded, from the list of its tensors: GGUF blocks where they
stay packed, dense in the runtime dtype elsewhere, as GGUFSource loads them. One rule for the memory plan
of a real file (GGUFSource.weight_sizes) and of a model shape in a quantization scheme before any file
exists (`scheme_sizes`: how many experts a 24 GB card holds at Q4_K_M).

A tensor stays packed where GGUFSource keeps it so (`keeps_blocks`): a packed block type and a layer that
takes packed weights (keeps_packed), or a lookup-only table (Qwen4-Exp's n-gram table) in any type with a
reference dequantization, or a routed-expert stack when every layer's experts can stay packed; llama.cpp's
layout change only a reordering of rows, and the parts of a joined tensor (q/k/v/z, gate/up) of one type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from strata.kernels.gguf_blocks import block_format, is_packed_type
from strata.weights.block_promotion import common_type
from strata.model.registry import dense_on_gpu, is_packed_expert_stack, keeps_packed
from strata.types import WeightSizes

# tables the model only gathers rows from, never multiplies by: their rows are dequantized as they are looked
# up (a PackedEmbedding), so any type with a reference dequantization stays as the file's blocks (F32, F16,
# BF16 and IQ4_NL too), and a table of ~100 GB is never copied
_LOOKUP_TABLES = re.compile(r"ple_embedding\.ngram_embedding\.weight$")


def is_lookup_table(hf_name: str) -> bool:
    """A table only read by the rows looked up (Qwen4-Exp's PLE n-gram tables)."""
    return _LOOKUP_TABLES.search(hf_name) is not None


def keeps_blocks(hf_name: str, qtype: int) -> bool:
    """Whether a 2-D tensor of `qtype` loads as the file's blocks (a PackedWeight) rather than dense, where
    llama.cpp's layout change only reordered its rows."""
    if _LOOKUP_TABLES.search(hf_name):
        return block_format(qtype) is not None
    return is_packed_type(qtype) and keeps_packed(hf_name)


@dataclass(frozen=True)
class TensorEntry:
    gguf_name: str
    hf_name: str        # where the loader puts it (strata.weights.gguf_names.hf_pieces)
    num_values: int
    num_experts: int    # its leading dimension, for a routed-expert stack
    qtype: int          # gguf.GGMLQuantizationType
    nbytes: int         # in the file
    row_wise: bool      # llama.cpp's layout change only reorders rows


def why_experts_dense(entries: list[TensorEntry]) -> str | None:
    """None when every routed-expert tensor can stay packed (a packed type, no value transform, a layer's gate and
    up of one type or of types with an exact common one: block_promotion); else why not ("" for a model without
    routed experts)."""
    types: dict[str, set[int]] = {}
    for e in entries:
        if is_packed_expert_stack(e.hf_name):
            if not is_packed_type(e.qtype):
                return f"{e.gguf_name} is {_type_name(e.qtype)}, not a type kept packed"
            if not e.row_wise:
                return f"{e.gguf_name}: llama.cpp changed its layout beyond reordering rows"
            types.setdefault(e.hf_name, set()).add(e.qtype)
    for hf_name, qtypes in types.items():
        if common_type(qtypes) is None:
            names = " and ".join(sorted(_type_name(q) for q in qtypes))
            return f"{hf_name} joins parts of types {names}, which have no exact common type"
    return None if types else ""


def expert_types(entries: Iterable[TensorEntry]) -> dict[str, int]:
    """Each routed-expert tensor (HF name) -> the one type its parts load as (block_promotion.common_type; their
    own where they share it), for the tensors whose parts have such a type."""
    types: dict[str, set[int]] = {}
    for e in entries:
        if is_packed_expert_stack(e.hf_name):
            types.setdefault(e.hf_name, set()).add(e.qtype)
    return {name: target for name, qtypes in types.items() if (target := common_type(qtypes)) is not None}


def loaded_sizes(entries: Iterable[TensorEntry], dtype: torch.dtype, experts_packed: bool) -> WeightSizes:
    """WeightSizes of the weights as loaded; a device expert slot holds the largest layer's expert; a lookup table
    kept as the file's blocks is `mapped`."""
    entries = list(entries)
    # a tensor stored in several parts loads packed where every part does, whatever their types (gguf_source._join)
    all_parts_packed: dict[str, bool] = {}
    for e in entries:
        # (sizes for the CUDA plan: the weights a CUDA model dequantizes count in `dtype`)
        packed = keeps_blocks(e.hf_name, e.qtype) and e.row_wise and not dense_on_gpu(e.hf_name)
        all_parts_packed[e.hf_name] = all_parts_packed.get(e.hf_name, True) and packed
    total = experts = mapped = 0
    targets = expert_types(entries)
    layer_experts: dict[str, list[int]] = {}  # MoE layer -> [its experts' bytes, number of experts]
    for e in entries:
        dense = e.num_values * dtype.itemsize
        if is_lookup_table(e.hf_name) and keeps_blocks(e.hf_name, e.qtype) and e.row_wise:
            mapped += e.nbytes  # stays over the file's map (loader.place_host_tables): neither device nor RAM
            continue
        if is_packed_expert_stack(e.hf_name):
            target = targets.get(e.hf_name, e.qtype)  # a part promoted to its tensor's common type grows
            nbytes = (e.nbytes if target == e.qtype else _bytes_as(e.num_values, target)) if experts_packed else dense
            layer = layer_experts.setdefault(e.hf_name.rsplit(".", 1)[0], [0, e.num_experts])
            layer[0] += nbytes
            experts += nbytes
        elif all_parts_packed[e.hf_name]:
            nbytes = e.nbytes
        else:
            nbytes = dense
        total += nbytes
    slot_bytes = max((nbytes // count for nbytes, count in layer_experts.values()), default=0)
    return WeightSizes(total, experts, sum(count for _, count in layer_experts.values()), slot_bytes, mapped=mapped)


def scheme_sizes(spec: str, scheme: str, dtype: torch.dtype) -> WeightSizes:
    """The loaded sizes of the model `spec` (random:<shape>, an HF folder) written in `scheme` (q4_k_m, ...),
    without writing or building it: the writer's tensor list and type choices on a meta model."""
    from strata.model.registry import model_class
    from strata.weights.gguf_export import _hf_config, choose_types, get_scheme, hf_state
    from strata.weights.gguf_names import GGUF_ARCHITECTURES, TensorInverter, hf_pieces
    from strata.weights.gguf_writer import llama_cpp_shapes
    from strata.weights.source import open_source

    source = open_source(spec)
    cfg = source.model_config()
    hf_config = _hf_config(source)
    with torch.device("meta"):
        meta = model_class(cfg)(cfg)
    shapes = llama_cpp_shapes(hf_config, hf_state(meta))
    types = choose_types(get_scheme(scheme), shapes, hf_config["num_hidden_layers"])
    arch = next(a for a, hf in GGUF_ARCHITECTURES.items() if hf == cfg.architecture)
    inverter = TensorInverter(arch, hf_config)
    entries = []
    ple_layers = [i - 1 for i in hf_config.get("ple_layer_ids") or ()]
    for name, shape in shapes:
        pieces = hf_pieces(arch, name, hf_config["num_hidden_layers"], ple_layers[0] if ple_layers else None)
        block, type_bytes = _block(types[name])
        for piece in pieces or ():
            entries.append(TensorEntry(name, piece.hf_name, math.prod(shape) // piece.share,
                                       shape[0] if len(shape) == 3 else 0, int(types[name]),
                                       math.prod(shape) // block * type_bytes // piece.share,
                                       inverter.is_row_wise(name)))
    return loaded_sizes(entries, dtype, why_experts_dense(entries) is None)


def _block(qtype) -> tuple[int, int]:
    from gguf import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[qtype]


def _bytes_as(num_values: int, qtype: int) -> int:
    """The bytes of `num_values` values in blocks of `qtype`."""
    values, nbytes = _block(qtype)
    return num_values // values * nbytes


def _type_name(qtype: int) -> str:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(qtype).name
