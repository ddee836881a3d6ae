"""Test utility: write a GGUF file from an HF config dict and state dict the way llama.cpp's
convert_hf_to_gguf.py does: tensor names from gguf-py's own name map (not from Strata's reader),
llama.cpp's layout transforms (Llama q/k permutation, stacked experts, Qwen3-Next's norm + 1,
-exp(A_log), conv squeeze, q/k/v/z split) and metadata keys. So a round trip through GGUFSource checks
the reader against llama.cpp's conventions, not against itself.
"""

from __future__ import annotations

import math
import re

import gguf
import numpy as np
import torch

ARCHS = {
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "Qwen3MoeForCausalLM": gguf.MODEL_ARCH.QWEN3MOE,
    "Qwen3NextForCausalLM": gguf.MODEL_ARCH.QWEN3NEXT,
}
_PER_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
# llama.cpp's Qwen3.5 MTP convention (its Qwen3-Next converter drops mtp.*): mtp.* -> block L (+ i)
_MTP_TOP = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
            "norm": "shared_head.norm"}
_NEXTN = {"eh_proj": "nextn.eh_proj", "enorm": "nextn.enorm", "hnorm": "nextn.hnorm",
          "shared_head.norm": "nextn.shared_head_norm"}


def write_gguf(path: str, hf_config: dict, state_dict: dict[str, torch.Tensor], quant: str = "F32",
               split_qkvz: bool = True, extra_tensors: dict[str, np.ndarray] | None = None,
               types: dict[str, str] | None = None, split_max_tensors: int = 0) -> list[str]:
    """quant: F32, F16 or any type gguf-py can quantize (Q8_0, Q4_0, Q4_1, Q5_0, BF16, ...); 1-D tensors
    and rows whose length is not a multiple of the block size stay F32, as in llama.cpp.
    types: llama.cpp name pattern (re.search) -> type, overriding `quant` for the tensors it matches (the
    first match wins), e.g. {r"attn_v": "Q6_K"}. Types gguf-py cannot quantize (the K and IQ types) get
    random blocks with small finite scales instead of the tensor's values: loads of such a file can be
    compared with each other, not with the HF model.
    split_qkvz=False writes Qwen3-Next's in_proj_qkvz as older llama.cpp did (ssm_in, HF layout).
    extra_tensors are written as given, under their llama.cpp names (e.g. rope_freqs.weight).
    split_max_tensors > 0 splits the file as gguf-split does (<stem>-00001-of-0000N.gguf, metadata in
    part 1). Returns the paths written."""
    arch = ARCHS[hf_config["architectures"][0]]
    num_blocks = hf_config["num_hidden_layers"] + _num_mtp(hf_config)
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[arch], split_max_tensors=split_max_tensors)
    _write_metadata(writer, arch, hf_config)
    names = gguf.get_tensor_name_map(arch, num_blocks)
    rng = np.random.default_rng(0)
    for name, tensor in _llama_cpp_tensors(arch, hf_config, state_dict, names, split_qkvz):
        qtype = next((t for pattern, t in (types or {}).items() if re.search(pattern, name)), quant)
        _add_tensor(writer, name, tensor.float().contiguous().numpy(), gguf.GGMLQuantizationType[qtype], rng)
    if _rope(hf_config).get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(hf_config))
    for name, array in (extra_tensors or {}).items():
        writer.add_tensor(name, array)
    paths = [str(p) for p in writer.format_shard_names(writer.path)]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return paths


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
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if cfg.get("num_experts") or cfg.get("num_local_experts"):
        w.add_expert_count(cfg.get("num_experts") or cfg["num_local_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", True)))
    if arch == gguf.MODEL_ARCH.QWEN3NEXT:
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
        w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
        w.add_ssm_state_size(cfg["linear_key_head_dim"])
        w.add_ssm_group_count(cfg["linear_num_key_heads"])
        w.add_ssm_time_step_rank(cfg["linear_num_value_heads"])
        w.add_ssm_inner_size(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"])
        w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", 0.25)))
    if _num_mtp(cfg):
        w.add_nextn_predict_layers(_num_mtp(cfg))
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(cfg["vocab_size"])])
    w.add_token_types([gguf.TokenType.NORMAL] * cfg["vocab_size"])
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        if isinstance(cfg.get(key), int):
            add(cfg[key])


def _llama_cpp_tensors(arch, cfg: dict, state_dict: dict, names, split_qkvz: bool):
    per_expert: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.float()
        if name.startswith("mtp."):
            name = _mtp_block_name(name, cfg["num_hidden_layers"])
        if m := _PER_EXPERT.match(name):
            per_expert.setdefault((int(m.group(1)), m.group(3)), {})[int(m.group(2))] = tensor
            continue
        if name.endswith("mlp.experts.gate_up_proj"):  # HF [E, 2I, D] -> gate, up [E, I, D]
            gate, up = tensor.chunk(2, dim=1)
            base = name.removesuffix("gate_up_proj")
            yield from _convert(arch, cfg, base + "gate_proj.weight", gate, names, split_qkvz)
            yield from _convert(arch, cfg, base + "up_proj.weight", up, names, split_qkvz)
            continue
        if name.endswith("mlp.experts.down_proj"):
            name += ".weight"
        if cfg.get("tie_word_embeddings") and name == "lm_head.weight":
            continue
        yield from _convert(arch, cfg, name, tensor, names, split_qkvz)
    for (layer, proj), experts in per_expert.items():
        stacked = torch.stack([experts[e] for e in sorted(experts)])
        yield from _convert(arch, cfg, f"model.layers.{layer}.mlp.experts.{proj}.weight", stacked, names,
                            split_qkvz)


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
    if arch == gguf.MODEL_ARCH.QWEN3NEXT:
        if name.endswith(".A_log"):
            t = -torch.exp(t)
        elif name.endswith(".dt_bias"):
            name = name.removesuffix(".dt_bias") + ".dt_proj.bias"
        elif "conv1d" in name:
            t = t.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            t = t + 1
        if name.endswith("in_proj_qkvz.weight") and split_qkvz:
            layer = int(name.split(".")[2])
            qkv, z = _split_qkvz(t, cfg)
            yield f"blk.{layer}.attn_qkv.weight", qkv
            yield f"blk.{layer}.attn_gate.weight", z
            return
    yield _gguf_name(name, names), t


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


def _split_qkvz(w: torch.Tensor, cfg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    # Qwen3NextModel.modify_tensors: [q, k, v, z] per key head -> [q all | k all | v all] and z
    num_k, num_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    k_dim, v_dim, hidden = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["hidden_size"]
    sizes = [k_dim, k_dim, num_v // num_k * v_dim, num_v // num_k * v_dim]
    q, k, v, z = torch.split(w.permute(1, 0).reshape(hidden, num_k, sum(sizes)), sizes, dim=-1)
    qkv = torch.cat([p.reshape(hidden, -1) for p in (q, k, v)], dim=-1).permute(1, 0).contiguous()
    return qkv, z.reshape(hidden, -1).permute(1, 0).contiguous()


def _add_tensor(writer: gguf.GGUFWriter, name: str, data: np.ndarray, qtype, rng: np.random.Generator) -> None:
    block_size = gguf.GGML_QUANT_SIZES[qtype][0]
    if qtype == gguf.GGMLQuantizationType.F32 or data.ndim < 2 or data.shape[-1] % block_size:
        writer.add_tensor(name, data)
    elif qtype == gguf.GGMLQuantizationType.F16:
        writer.add_tensor(name, data.astype(np.float16))
    else:
        try:
            blocks = gguf.quants.quantize(data, qtype)
        except NotImplementedError:
            blocks = random_blocks(data.shape, qtype, rng)
        writer.add_tensor(name, blocks, raw_dtype=qtype)


# byte offsets of the float16 scales (d, and dmin where the type has one) in a block of each type
# gguf-py cannot quantize; the other bytes (sub-block scales, quants) may be anything
F16_SCALES = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_XS": (0,), "Q2_K": (80, 82), "Q3_K": (108,)}


def random_blocks(shape: tuple[int, ...], qtype, rng: np.random.Generator, scale: float = 1e-3) -> np.ndarray:
    """Random uint8 blocks of `qtype` for values of `shape` [..., K], with finite float16 scales near `scale`
    (the sub-block scales and quants stay random), so that every block decodes to finite values."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    num_blocks = int(np.prod(shape)) // block_size
    blocks = rng.integers(0, 256, (num_blocks, type_size), dtype=np.uint8)
    for offset in F16_SCALES[qtype.name]:
        d = (rng.uniform(0.5, 1.5, num_blocks) * scale).astype(np.float16)
        blocks[:, offset:offset + 2] = d.view(np.uint8).reshape(num_blocks, 2)
    return blocks.reshape(*shape[:-1], shape[-1] // block_size * type_size)
