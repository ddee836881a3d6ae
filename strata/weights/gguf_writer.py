"""Writing a GGUF file from an HF config dict and HF-named tensors the way llama.cpp's convert_hf_to_gguf.py
does (architectures llama, qwen3, qwen3moe, qwen3next, qwen35, qwen35moe, qwen4exp): tensor names from gguf-py's
own name map (not from Strata's reader, so a round trip checks the reader against llama.cpp; qwen4exp's own
names, which the installed gguf-py lacks, from gguf_writer_qwen4exp.py), llama.cpp's layout transforms (Llama
q/k permutation, stacked experts, Qwen3-Next's norm + 1, -exp(A_log), conv squeeze, q/k/v/z split, Qwen3.5's
value heads tiled, Qwen4-Exp's) and metadata keys. Streams: tensor infos are planned on the meta device,
then each tensor is transformed, quantized on its own device and written before the next is touched (host
memory: one tensor's bytes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gguf
import numpy as np
import torch

from strata.config import hf_rope_scaling, rope_attention_factor
from strata.weights import gguf_writer_qwen4exp as qwen4exp
from strata.weights.quantize import quantize

ARCHS = {
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "Qwen3MoeForCausalLM": gguf.MODEL_ARCH.QWEN3MOE,
    "Qwen3NextForCausalLM": gguf.MODEL_ARCH.QWEN3NEXT,
    "Qwen3_5ForCausalLM": gguf.MODEL_ARCH.QWEN35,
    "Qwen3_5MoeForCausalLM": gguf.MODEL_ARCH.QWEN35MOE,
    "Qwen4ExpForCausalLM": qwen4exp.ARCH,  # no gguf.MODEL_ARCH member yet: its name
}
_HYBRID = (gguf.MODEL_ARCH.QWEN3NEXT, gguf.MODEL_ARCH.QWEN35, gguf.MODEL_ARCH.QWEN35MOE, qwen4exp.ARCH)
_QWEN35_LIKE = (gguf.MODEL_ARCH.QWEN35, gguf.MODEL_ARCH.QWEN35MOE, qwen4exp.ARCH)  # value heads tiled, mrope
_QWEN35_DEFAULT_MROPE_SECTION = [11, 11, 10, 0]  # _Qwen35MRopeMixin: llama.cpp's loader requires the key
_PER_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
# llama.cpp's Qwen3.5 MTP convention (its Qwen3-Next converter drops mtp.*): mtp.* -> block L (+ i)
_MTP_TOP = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
            "norm": "shared_head.norm"}
_NEXTN = {"eh_proj": "nextn.eh_proj", "enorm": "nextn.enorm", "hnorm": "nextn.hnorm",
          "shared_head.norm": "nextn.shared_head_norm"}
_SPECIAL_ID_WRITERS = {"bos": "add_bos_token_id", "eos": "add_eos_token_id", "unknown": "add_unk_token_id",
                       "padding": "add_pad_token_id", "eot": "add_eot_token_id"}

# (llama.cpp tensor name, its shape) -> the GGML type to store it in
TypeChooser = Callable[[str, tuple[int, ...]], gguf.GGMLQuantizationType]
# (float tensor, type) -> its GGUF bytes, uint8 [..., bytes per row] on the tensor's device
Encoder = Callable[[torch.Tensor, gguf.GGMLQuantizationType], "torch.Tensor | np.ndarray"]


@dataclass(frozen=True)
class Vocab:
    """A tokenizer as tokenizer.ggml.* metadata (what llama.cpp and strata.tokenizer_gguf read)."""

    model: str  # "gpt2" (byte-level BPE) or "llama" (sentencepiece)
    tokens: list[str]  # [V]
    token_types: list[int]  # [V] gguf.TokenType
    merges: list[str] | None = None  # "left right", best first
    pre: str | None = None
    scores: list[float] | None = None
    special_ids: dict[str, int] = field(default_factory=dict)  # "bos", "eos", "eot", "unknown", "padding"
    add_bos: bool | None = None
    chat_template: str | None = None

    def add_to(self, w: gguf.GGUFWriter) -> None:
        w.add_tokenizer_model(self.model)
        if self.pre:
            w.add_tokenizer_pre(self.pre)
        w.add_token_list(self.tokens)
        w.add_token_types(self.token_types)
        if self.scores is not None:
            w.add_token_scores(self.scores)
        if self.merges:
            w.add_token_merges(self.merges)
        for name, token_id in self.special_ids.items():
            getattr(w, _SPECIAL_ID_WRITERS[name])(token_id)
        if self.add_bos is not None:
            w.add_add_bos_token(self.add_bos)
        if self.chat_template:
            w.add_chat_template(self.chat_template)


@dataclass(frozen=True)
class _Planned:
    name: str
    shape: tuple[int, ...]
    qtype: gguf.GGMLQuantizationType


def write_gguf(path: str, hf_config: dict, state_dict: Mapping[str, Any], type_of: TypeChooser, vocab,
               split_qkvz: bool = True, extra_tensors: dict[str, np.ndarray] | None = None,
               split_max_tensors: int = 0, encode: Encoder = quantize, file_type: int | None = None,
               on_tensor: Callable[[str, gguf.GGMLQuantizationType, int], None] | None = None,
               shapes: list[tuple[str, tuple[int, ...]]] | None = None) -> list[str]:
    """Write `state_dict` (HF checkpoint names -> tensors on any device, or PackedWeights, dequantized one at a
    time; anything whose items() gives the same pairs each time it is called) as llama.cpp would.
    type_of(llama.cpp name, shape) picks each tensor's type, encode(tensor, type) its bytes (on the tensor's
    device). vocab: anything with add_to(GGUFWriter) that writes tokenizer.* metadata (a Vocab).
    split_qkvz=False writes Qwen3-Next's in_proj_qkvz as older llama.cpp did (ssm_in, HF layout).
    Qwen3.5 value heads are tiled as llama.cpp does, unless hf_config says they are already
    ("linear_value_heads_tiled": a GGUF source's tensors).
    extra_tensors are written as given, under their llama.cpp names (e.g. rope_freqs.weight).
    split_max_tensors > 0 splits the file as gguf-split does (<stem>-00001-of-0000N.gguf, metadata in
    part 1). on_tensor(name, type, bytes) is called after each tensor is written. shapes: llama_cpp_shapes'
    answer, where the caller has it already (it walks `state_dict` once more). Returns the paths written."""
    arch = ARCHS[hf_config["architectures"][0]]
    names = _name_map(arch, hf_config)
    writer = gguf.GGUFWriter(path, arch if arch == qwen4exp.ARCH else gguf.MODEL_ARCH_NAMES[arch],
                             split_max_tensors=split_max_tensors)
    _write_metadata(writer, arch, hf_config)
    vocab.add_to(writer)
    if file_type is not None:
        writer.add_file_type(file_type)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    plan = [_Planned(name, shape, type_of(name, shape))
            for name, shape in shapes or llama_cpp_shapes(hf_config, state_dict, split_qkvz)]
    extras = dict(extra_tensors or {})
    if _rope(hf_config).get("rope_type") == "llama3":
        extras = {"rope_freqs.weight": llama3_rope_factors(hf_config), **extras}
    for p in plan:
        writer.add_tensor_info(p.name, p.shape, np.dtype(np.float32), _nbytes(p.shape, p.qtype), raw_dtype=p.qtype)
    for name, array in extras.items():
        writer.add_tensor_info(name, array.shape, array.dtype, array.nbytes)
    paths = [str(p) for p in writer.format_shard_names(writer.path)]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    converted = _llama_cpp_tensors(arch, hf_config, state_dict, names, split_qkvz)
    for p, (name, tensor) in zip(plan, converted, strict=True):
        data = encode(tensor, p.qtype)
        data = data.cpu().numpy() if isinstance(data, torch.Tensor) else data
        writer.write_tensor_data(data)
        if on_tensor is not None:
            on_tensor(name, p.qtype, data.nbytes)
    for array in extras.values():
        writer.write_tensor_data(array)
    writer.close()
    return paths


def llama_cpp_shapes(hf_config: dict, state_dict: Mapping[str, Any], split_qkvz: bool = True
                     ) -> list[tuple[str, tuple[int, ...]]]:
    """The (llama.cpp name, shape) of every tensor write_gguf writes from `state_dict` (but the extras), in
    its order; worked out on the meta device: no data is read."""
    arch = ARCHS[hf_config["architectures"][0]]
    names = _name_map(arch, hf_config)
    meta = {name: torch.empty(tuple(t.shape), device="meta") for name, t in state_dict.items()}
    return [(name, tuple(t.shape)) for name, t in _llama_cpp_tensors(arch, hf_config, meta, names, split_qkvz)]


def _name_map(arch, cfg: dict) -> gguf.TensorNameMap:
    # qwen4exp shares Qwen3.5-MoE's names for the tensors they both have (gguf_writer_qwen4exp: the others)
    return gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN35MOE if arch == qwen4exp.ARCH else arch,
                                    cfg["num_hidden_layers"] + _num_mtp(cfg))


def _nbytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return math.prod(shape) // block_size * type_size


def _num_mtp(cfg: dict) -> int:
    return cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0


def _rope(cfg: dict) -> dict:
    return {**(cfg.get("rope_scaling") or {}), **(cfg.get("rope_parameters") or {}),
            **{k: cfg[k] for k in ("rope_theta", "partial_rotary_factor") if k in cfg}}


def llama3_rope_factors(cfg: dict) -> np.ndarray:
    """LlamaModel.generate_extra_tensors: per-frequency divisors of Llama-3's rope scaling."""
    rope = _rope(cfg)
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    old_len, factor = rope["original_max_position_embeddings"], rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    factors = []
    for freq in 1.0 / rope["rope_theta"] ** (np.arange(0, dim, 2) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < old_len / high:
            factors.append(1.0)
        elif wavelen > old_len / low:
            factors.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def _write_metadata(w: gguf.GGUFWriter, arch, cfg: dict) -> None:
    num_heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // num_heads
    rope = _rope(cfg)
    w.add_block_count(cfg["num_hidden_layers"] + _num_mtp(cfg))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    if "intermediate_size" in cfg:  # Qwen3.5 MoE configs have none
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(num_heads)
    w.add_head_count_kv(cfg.get("num_key_value_heads", num_heads))
    w.add_rope_freq_base(rope.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if "head_dim" in cfg:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == gguf.MODEL_ARCH.LLAMA:
        w.add_vocab_size(cfg["vocab_size"])  # the qwen archs leave it to the token list
        w.add_rope_dimension_count(head_dim)
    rope_type = rope.get("rope_type", rope.get("type"))
    if rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if rope_type == "yarn":
        _write_yarn(w, rope, cfg)
    if cfg.get("num_experts") or cfg.get("num_local_experts"):
        w.add_expert_count(cfg.get("num_experts") or cfg["num_local_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", True)))
        if cfg.get("shared_expert_intermediate_size"):
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if arch in _HYBRID:
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        if cfg.get("layer_types"):  # which blocks recur (MTP blocks: none); llama.cpp reads it before the interval
            recurrent = [kind == "linear_attention" for kind in cfg["layer_types"]]
            w.add_array(f"{w.arch}.attention.recurrent_layers", recurrent + [False] * _num_mtp(cfg))
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.25)))
    if arch in _QWEN35_LIKE:
        sections = list(rope.get("mrope_section") or _QWEN35_DEFAULT_MROPE_SECTION)
        w.add_rope_dimension_sections((sections + [0] * 4)[:4])
    if _num_mtp(cfg):
        w.add_nextn_predict_layers(_num_mtp(cfg))
    if arch == qwen4exp.ARCH:
        qwen4exp.write_metadata(w, cfg, cfg["num_hidden_layers"] + _num_mtp(cfg))


def _write_yarn(w: gguf.GGUFWriter, rope: dict, cfg: dict) -> None:
    """YaRN's keys as convert_hf_to_gguf.py writes them (yarn_attn_factor: HF's attention_factor, the total
    magnitude); mscale / mscale_all_dim, which llama.cpp's keys cannot say for these archs, as the attention
    factor they give in HF. A missing factor or original context is written as HF computes it."""
    yarn = hf_rope_scaling(cfg, rope)
    if yarn.get("truncate", True) is False:
        raise ValueError("YaRN with truncate=false cannot be written to GGUF: llama.cpp has no key for it and "
                         "always truncates the correction range")
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(yarn["factor"])
    w.add_rope_scaling_orig_ctx_len(yarn["original_max_position_embeddings"])
    if yarn.get("attention_factor") is not None or (yarn.get("mscale") and yarn.get("mscale_all_dim")):
        w.add_rope_scaling_yarn_attn_factor(rope_attention_factor(yarn))
    if yarn.get("beta_fast") is not None:
        w.add_rope_scaling_yarn_beta_fast(yarn["beta_fast"])
    if yarn.get("beta_slow") is not None:
        w.add_rope_scaling_yarn_beta_slow(yarn["beta_slow"])


def _llama_cpp_tensors(arch, cfg: dict, state_dict: Mapping[str, Any], names, split_qkvz: bool):
    """HF (name, tensor) pairs -> llama.cpp (name, tensor) pairs, in a fixed order. Tensors keep their dtype
    (a 16-bit model is not copied to float32 whole: the quantizer converts a chunk at a time) but where
    llama.cpp changes values, which is done in float32."""
    per_expert: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
    items = state_dict.items()
    if arch == qwen4exp.ARCH:
        items = qwen4exp.hf_stream(cfg, items, _cat)
    for name, tensor in items:
        if cfg.get("tie_word_embeddings") and name == "lm_head.weight":
            continue
        if not isinstance(tensor, torch.Tensor):
            tensor = tensor.dequantize(torch.float32)
        if name.startswith("mtp."):
            name = _mtp_block_name(name, cfg["num_hidden_layers"])
        if m := _PER_EXPERT.match(name):
            # HF per-expert tensors: stacked [E, ...] as soon as a layer's projection has all of them
            layer, proj = int(m.group(1)), m.group(3)
            experts = per_expert.setdefault((layer, proj), {})
            experts[int(m.group(2))] = tensor
            if len(experts) == cfg.get("num_experts"):
                yield from _stacked_experts(arch, cfg, layer, proj, per_expert.pop((layer, proj)), names,
                                            split_qkvz)
            continue
        if name.endswith("mlp.experts.gate_up_proj"):  # HF [E, 2I, D] -> gate, up [E, I, D]
            gate, up = tensor.chunk(2, dim=1)
            base = name.removesuffix("gate_up_proj")
            yield from _convert(arch, cfg, base + "gate_proj.weight", gate, names, split_qkvz)
            yield from _convert(arch, cfg, base + "up_proj.weight", up, names, split_qkvz)
            continue
        if name.endswith("mlp.experts.down_proj"):
            name += ".weight"
        yield from _convert(arch, cfg, name, tensor, names, split_qkvz)
    for (layer, proj), experts in per_expert.items():
        yield from _stacked_experts(arch, cfg, layer, proj, experts, names, split_qkvz)


def _stacked_experts(arch, cfg: dict, layer: int, proj: str, experts: dict[int, torch.Tensor], names,
                     split_qkvz: bool):
    stacked = _cat([experts[e].unsqueeze(0) for e in sorted(experts)], dim=0)
    yield from _convert(arch, cfg, f"model.layers.{layer}.mlp.experts.{proj}.weight", stacked, names, split_qkvz)


def _mtp_block_name(name: str, num_layers: int) -> str:
    parts = name.split(".", 3)
    if parts[1] == "layers":
        return f"model.layers.{num_layers + int(parts[2])}.{parts[3]}"
    return f"model.layers.{num_layers}.{_MTP_TOP[parts[1]]}.{parts[2]}"


def _convert(arch, cfg: dict, name: str, t: torch.Tensor, names, split_qkvz: bool):
    """One HF tensor -> (llama.cpp name, tensor) pairs, as convert_hf_to_gguf.py's modify_tensors."""
    if arch == gguf.MODEL_ARCH.LLAMA and re.search(r"\.(q|k)_proj\.(weight|bias)$", name):
        heads = cfg["num_attention_heads"] if ".q_proj." in name else cfg["num_key_value_heads"]
        t = _permute(t, heads)
    if arch in _QWEN35_LIKE:
        t = _tile_value_heads(name, t, cfg)
    if arch == qwen4exp.ARCH and (own := qwen4exp.convert(cfg, name, t, _values)) is not None:
        yield from own
        return
    if arch in _HYBRID:
        if name.endswith(".A_log"):
            t = _values(t, lambda a_log: -torch.exp(a_log))
        elif name.endswith(".dt_bias"):
            name = name.removesuffix(".dt_bias") + ".dt_proj.bias"
        elif "conv1d" in name:
            t = t.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            t = _values(t, lambda w: w + 1)
        if name.endswith("in_proj_qkvz.weight") and split_qkvz:
            layer = int(name.split(".")[2])
            qkv, z = _split_qkvz(t, cfg)
            yield f"blk.{layer}.attn_qkv.weight", qkv
            yield f"blk.{layer}.attn_gate.weight", z
            return
    yield (arch == qwen4exp.ARCH and qwen4exp.gguf_name(name)) or _gguf_name(name, names), t


# On the meta device (the shape plan) torch's elementwise ops, cat and stack reach Python decompositions whose
# first call imports torch._dynamo (seconds): value-only changes are skipped there, and joins are copies.

def _values(t: torch.Tensor, change) -> torch.Tensor:
    return t if t.is_meta else change(t.float())


def _cat(parts: list[torch.Tensor], dim: int) -> torch.Tensor:
    """torch.cat, as slice copies."""
    shape = list(parts[0].shape)
    shape[dim] = sum(p.shape[dim] for p in parts)
    out, start = parts[0].new_empty(shape), 0
    for p in parts:
        out.narrow(dim, start, p.shape[dim]).copy_(p)
        start += p.shape[dim]
    return out


def _gguf_name(name: str, names) -> str:
    found = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if found is None and (m := re.match(r"model\.layers\.(\d+)\.(eh_proj|enorm|hnorm|shared_head\.norm)\.(\w+)$",
                                        name)):
        found = f"blk.{m.group(1)}.{_NEXTN[m.group(2)]}.{m.group(3)}"
    if found is None:
        raise KeyError(f"gguf-py has no llama.cpp name for {name}")
    return found


def _permute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    # LlamaModel.permute: each head's two rotate_half halves -> interleaved pairs
    return w.reshape(num_heads, 2, w.shape[0] // num_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tile_value_heads(name: str, t: torch.Tensor, cfg: dict) -> torch.Tensor:
    """_LinearAttentionVReorderBase.modify_tensors: with Hk < Hv, value heads go from HF's order, grouped by
    key head [g0v0, g0v1, ..., g1v0, ...], to tiled [g0v0, g1v0, ..., g0v1, g1v1, ...] (what ggml_repeat
    broadcasts), along the value-head axis of every tensor that has one."""
    num_k, num_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    if t.is_meta or num_k == num_v or cfg.get("linear_value_heads_tiled") or ".linear_attn." not in name:
        return t
    v_dim, qk_channels = cfg["linear_value_head_dim"], 2 * num_k * cfg["linear_key_head_dim"]
    if name.endswith((".in_proj_qkv.weight", ".conv1d.weight")):
        dim, kept, head_size = 0, qk_channels, v_dim  # q and k rows (channels) stay, then the value heads
    elif name.endswith(".in_proj_z.weight"):
        dim, kept, head_size = 0, 0, v_dim
    elif name.endswith((".in_proj_b.weight", ".in_proj_a.weight", ".A_log", ".dt_bias")):
        dim, kept, head_size = 0, 0, 1
    elif name.endswith(".out_proj.weight"):
        dim, kept, head_size = 1, 0, v_dim  # its columns
    else:
        return t
    tiled = torch.arange(num_v * head_size).reshape(num_k, num_v // num_k, head_size).transpose(0, 1).reshape(-1)
    order = torch.cat([torch.arange(kept), kept + tiled])
    return t.index_select(dim, order.to(t.device))


def _split_qkvz(w: torch.Tensor, cfg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    # Qwen3NextModel.modify_tensors: [q, k, v, z] per key head -> [q all | k all | v all] and z
    num_k, num_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    k_dim, v_dim, hidden = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["hidden_size"]
    sizes = [k_dim, k_dim, num_v // num_k * v_dim, num_v // num_k * v_dim]
    q, k, v, z = torch.split(w.permute(1, 0).reshape(hidden, num_k, sum(sizes)), sizes, dim=-1)
    qkv = _cat([p.reshape(hidden, -1) for p in (q, k, v)], dim=1).permute(1, 0).contiguous()
    return qkv, z.reshape(hidden, -1).permute(1, 0).contiguous()
