"""llama.cpp tensor names and layouts -> HF checkpoint names and layouts, for the GGUF architectures
Strata loads. Each rule undoes one step of llama.cpp's convert_hf_to_gguf.py (LlamaModel, Qwen2MoeModel,
Qwen3NextModel, Qwen3_5TextModel / Qwen3_5MoeTextModel). Transforms that only reorder rows (the llama rope
permutation, the qkvz interleave) are also given as row orders, so packed GGUF blocks go through them row by
row; the others (norm offsets, A_log, reshapes) run on float32 after dequantization.

- llama: attn_q / attn_k rows were permuted per head for llama.cpp's interleaved rope (`permute`).
- MoE: experts are stacked per layer, ffn_{gate,up,down}_exps [E, I, D] / [E, D, I]; gate and up are
  concatenated into HF's fused `mlp.experts.gate_up_proj` [E, 2I, D] (newer files: ffn_gate_up_exps).
- qwen3next: zero-centred RMSNorm weights were stored as 1 + w (every `*norm.weight` but ssm_norm);
  ssm_a = -exp(A_log); dt_bias became ssm_dt.bias; conv1d [C, 1, K] was squeezed to [C, K];
  in_proj_qkvz ([q_g | k_g | v_g | z_g] per key head g) was split into attn_qkv = [q | k | v] over all
  heads and attn_gate = z (older files keep HF's layout as ssm_in); in_proj_ba is kept as ssm_ba.
  llama.cpp drops `mtp.*`; blocks past num_hidden_layers are read with its Qwen3.5 convention
  (blk.{L+i}.nextn.* and blk.{L+i}.* -> mtp.*).
- qwen35 / qwen35moe (Qwen3.5, Qwen3.6): qwen3next's value changes; HF's four Gated DeltaNet inputs kept
  as attn_qkv (in_proj_qkv), attn_gate (in_proj_z), ssm_beta (in_proj_b), ssm_alpha (in_proj_a). With
  fewer key than value heads llama.cpp reordered the value heads (rows of those four, A_log, dt_bias, the
  value channels of conv1d, the columns of out_proj) from grouped by key head to tiled; that is NOT undone
  here (out_proj's columns cannot move inside packed blocks): the model reads them tiled
  (ModelConfig.linear_value_heads_tiled, set by gguf_source).
- qwen4exp (Qwen4-Exp, Qwen4ExpTextModel in llama.cpp's conversion/qwen4exp.py): qwen35moe's tensors and
  value changes, plus hyper-connections (hc_attn_* / hc_ffn_* per block, output_hc_* for the final mixer,
  gammas stored as 1 + w), QSA's index_qk_proj split into indexer.q_proj and indexer.k_proj (joined back
  as two parts), its q/k layernorms and PLE's three norms stored as 1 + w, PLE's conv1d squeezed, and the
  n-gram table's shards as one per_layer_token_embd [rows, row dim] (the PLE layer's, from metadata).
  The MTP block: mtp.fc_embedding and mtp.fc_hidden side by side as nextn.eh_proj [D, 2D] (embedding
  columns first: read back as two column pieces), its mixer as nextn.hc_head_*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "qwen3next": "Qwen3NextForCausalLM",
    "qwen35": "Qwen3_5ForCausalLM",
    "qwen35moe": "Qwen3_5MoeForCausalLM",
    "qwen4exp": "Qwen4ExpForCausalLM",
}
# Gated DeltaNet hybrids: zero-centred norms stored as 1 + w, ssm_a = -exp(A_log), squeezed conv1d
HYBRID_ARCHITECTURES = ("qwen3next", "qwen35", "qwen35moe", "qwen4exp")
SKIPPED_TENSORS = frozenset({"rope_freqs.weight"})  # Llama-3 rope scaling: read into the config instead

_GATE_UP = "mlp.experts.gate_up_proj"
_QKVZ = "linear_attn.in_proj_qkvz.weight"
_INDEX_QK = "self_attn.indexer.index_qk_proj.weight"
_PLE_TABLE = "ple.ple_embedding.ngram_embedding.weight"
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_QWEN4EXP_GLOBAL_NAMES = {
    **_GLOBAL_NAMES,
    "output_hc_norm.weight": "model.hyper_connection_mixer.hc_norm.weight",
    "output_hc_down.weight": "model.hyper_connection_mixer.input_mix_weight_down.weight",
    "output_hc_up.weight": "model.hyper_connection_mixer.input_mix_weight_up.weight",
}
# block suffix -> HF suffix, or (HF suffix, part, number of parts) for a tensor llama.cpp split in parts
_BLOCK_NAMES: dict[str, str | tuple[str, int, int]] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    **{f"attn_{gguf}.{kind}": f"self_attn.{hf}_proj.{kind}"
       for gguf, hf in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")) for kind in ("weight", "bias")},
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_exps.weight": (_GATE_UP, 0, 2),
    "ffn_up_exps.weight": (_GATE_UP, 1, 2),
    "ffn_gate_up_exps.weight": _GATE_UP,
    "ffn_down_exps.weight": "mlp.experts.down_proj",
}
_QWEN3NEXT_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
    "ssm_in.weight": _QKVZ,
    "attn_qkv.weight": (_QKVZ, 0, 2),
    "attn_gate.weight": (_QKVZ, 1, 2),
    "ssm_ba.weight": "linear_attn.in_proj_ba.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_a": "linear_attn.A_log",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
}
_QWEN35_BLOCK_NAMES = {
    **{k: v for k, v in _QWEN3NEXT_BLOCK_NAMES.items() if k not in ("ssm_in.weight", "ssm_ba.weight")},
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
}
_QWEN4EXP_BLOCK_NAMES = {
    **_QWEN35_BLOCK_NAMES,
    **{f"hc_{gguf}_{part}.weight": f"{hf}_hyper_connection.{hf_part}.weight"
       for gguf, hf in (("attn", "attn"), ("ffn", "mlp"))
       for part, hf_part in (("norm", "hc_norm"), ("down", "input_mix_weight_down"), ("up", "input_mix_weight_up"),
                             ("inject", "block_inject_weight"))},
    "indexer.q_proj.weight": (_INDEX_QK, 0, 2),
    "indexer.k_proj.weight": (_INDEX_QK, 1, 2),
    "indexer.q_norm.weight": "self_attn.indexer.q_layernorm.weight",
    "indexer.k_norm.weight": "self_attn.indexer.k_layernorm.weight",
    "ple_key.weight": "ple.key_proj.weight",
    "ple_value.weight": "ple.value_proj.weight",
    "ple_norm_key.weight": "ple.norm_key.weight",
    "ple_norm_query.weight": "ple.norm_query.weight",
    "ple_norm_conv.weight": "ple.norm_conv.weight",
    "ple_conv1d.weight": "ple.conv1d.weight",
}
_NAMES_BY_ARCH = {"llama": _BLOCK_NAMES, "qwen3": _BLOCK_NAMES, "qwen3moe": _BLOCK_NAMES,
                  "qwen3next": _QWEN3NEXT_BLOCK_NAMES, "qwen35": _QWEN35_BLOCK_NAMES, "qwen35moe": _QWEN35_BLOCK_NAMES,
                  "qwen4exp": _QWEN4EXP_BLOCK_NAMES}
# MTP block suffix -> HF name, or HF names of the tensors a GGUF tensor holds side by side (column blocks)
_MTP_NAMES: dict[str, str | tuple[str, ...]] = {
    "nextn.eh_proj.weight": "mtp.fc.weight",
    "nextn.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
    "nextn.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
    "nextn.shared_head_norm.weight": "mtp.norm.weight",
}
_QWEN4EXP_MTP_NAMES: dict[str, str | tuple[str, ...]] = {
    **_MTP_NAMES,
    "nextn.eh_proj.weight": ("mtp.fc_embedding.weight", "mtp.fc_hidden.weight"),
    "nextn.hc_head_norm.weight": "mtp.hyper_connection_mixer.hc_norm.weight",
    "nextn.hc_head_down.weight": "mtp.hyper_connection_mixer.input_mix_weight_down.weight",
    "nextn.hc_head_up.weight": "mtp.hyper_connection_mixer.input_mix_weight_up.weight",
}
# PLE's norms: zero-centred, stored as 1 + w, but not named *norm.weight
_PLE_NORMS = ("ple_norm_key.weight", "ple_norm_query.weight", "ple_norm_conv.weight")
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class HFPiece:
    """Where one GGUF tensor goes: an HF tensor, or part `part` of `num_parts` that are joined into it (rows),
    or, with `columns` = (i, n), the i-th of n equal column blocks of the GGUF tensor (which holds n HF
    tensors side by side)."""

    hf_name: str
    part: int = 0
    num_parts: int = 1
    columns: tuple[int, int] | None = None

    @property
    def share(self) -> int:
        """The piece's share of its GGUF tensor's values and bytes: 1 / share."""
        return self.columns[1] if self.columns else 1


def hf_pieces(arch: str, gguf_name: str, num_layers: int, ple_layer: int | None = None) -> list[HFPiece] | None:
    """-> the HF destinations of a llama.cpp tensor name (one but for a tensor holding several side by side),
    or None when the name is unknown. ple_layer: the layer of qwen4exp's n-gram table (per_layer_token_embd)."""
    qwen4exp = arch == "qwen4exp"
    global_names = _QWEN4EXP_GLOBAL_NAMES if qwen4exp else _GLOBAL_NAMES
    if gguf_name in global_names:
        return [HFPiece(global_names[gguf_name])]
    if qwen4exp and gguf_name == "per_layer_token_embd.weight":
        return None if ple_layer is None else [HFPiece(f"model.layers.{ple_layer}.{_PLE_TABLE}")]
    m = _BLOCK.match(gguf_name)
    if m is None:
        return None
    layer, suffix = int(m.group(1)), m.group(2)
    mtp_names = _QWEN4EXP_MTP_NAMES if qwen4exp else _MTP_NAMES
    if layer >= num_layers and suffix in mtp_names:
        target = mtp_names[suffix]
        if isinstance(target, tuple):
            return [HFPiece(name, columns=(i, len(target))) for i, name in enumerate(target)]
        return [HFPiece(target)]
    prefix = f"model.layers.{layer}." if layer < num_layers else f"mtp.layers.{layer - num_layers}."
    target = _NAMES_BY_ARCH[arch].get(suffix)
    if target is None:
        return None
    hf_suffix, part, num_parts = target if isinstance(target, tuple) else (target, 0, 1)
    return [HFPiece(prefix + hf_suffix, part, num_parts)]


class TensorInverter:
    """Undoes llama.cpp's layout changes, given the model's HF config dict."""

    def __init__(self, arch: str, hf_config: dict[str, Any]) -> None:
        self.arch = arch
        self.num_heads = hf_config["num_attention_heads"]
        self.num_kv_heads = hf_config["num_key_value_heads"]
        self.linear_dims = tuple(hf_config.get(k, 0) for k in (
            "linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads", "linear_value_head_dim"))

    def transform(self, gguf_name: str, x: torch.Tensor) -> torch.Tensor:
        suffix = _block_suffix(gguf_name)
        if self.arch == "llama" and suffix.startswith(("attn_q.", "attn_k.")):
            return unpermute_rope_rows(x, self.num_heads if suffix.startswith("attn_q.") else self.num_kv_heads)
        change = self._value_change(suffix)
        return x if change is None else change(x)

    def is_row_wise(self, gguf_name: str) -> bool:
        """Whether `transform` only reorders rows (or does nothing): then row_order describes it."""
        return self._value_change(_block_suffix(gguf_name)) is None

    def row_order(self, gguf_name: str, num_rows: int) -> torch.Tensor | None:
        """For a row-wise tensor: the order in which `transform` takes its rows, None when it keeps them."""
        order = self.transform(gguf_name, torch.arange(num_rows))
        return None if torch.equal(order, torch.arange(num_rows)) else order

    def _value_change(self, suffix: str):
        if self.arch not in HYBRID_ARCHITECTURES:
            return None
        if (suffix.endswith("norm.weight") and suffix != "ssm_norm.weight") or suffix in _PLE_NORMS:
            return lambda x: x - 1.0
        if suffix == "ssm_a":
            return lambda x: torch.log(-x)
        if suffix in ("ssm_conv1d.weight", "ple_conv1d.weight"):
            return lambda x: x.unsqueeze(1)  # [C, K] -> [C, 1, K]
        if suffix == "ffn_gate_inp_shexp.weight":
            return lambda x: x.reshape(1, -1)  # a [D] vector in some files, HF's Linear(D, 1) weight [1, D]
        return None

    def join(self, hf_name: str, parts: list[torch.Tensor]) -> torch.Tensor:
        if hf_name.endswith(_GATE_UP):
            return torch.cat(parts, dim=1)  # [E, I, D] x 2 -> [E, 2I, D]
        if hf_name.endswith(_INDEX_QK):
            return torch.cat(parts)  # index queries [Hi Di, D], then the index key [Di, D]
        return self.interleave_qkvz(*parts)

    def join_order(self, hf_name: str, part_rows: list[int]) -> torch.Tensor:
        """The rows of `join`'s result as indices into the parts' rows one after the other (qkvz and the
        indexer's q/k: the experts' gate/up join stacks along dim 1, which is not a row order)."""
        if hf_name.endswith(_GATE_UP):
            raise ValueError(f"{hf_name}: the experts' gate/up join is not a row order")
        starts = [sum(part_rows[:i]) for i in range(len(part_rows))]
        columns = [torch.arange(start, start + rows).unsqueeze(1) for start, rows in zip(starts, part_rows)]
        return self.join(hf_name, columns).squeeze(1)  # the join moves whole rows: rows [M, 1] carry indices

    def interleave_qkvz(self, qkv: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """attn_qkv [(2 Hk Dk + Hv Dv), D] and attn_gate [Hv Dv, D] -> HF in_proj_qkvz, whose rows are
        grouped per key head g: [q_g (Dk) | k_g (Dk) | v_g (Hv/Hk Dv) | z_g (Hv/Hk Dv)]."""
        num_k_heads, k_dim, num_v_heads, v_dim = self.linear_dims
        hidden = qkv.shape[-1]
        q, k, v = qkv.split([num_k_heads * k_dim, num_k_heads * k_dim, num_v_heads * v_dim])
        groups = [t.reshape(num_k_heads, -1, hidden) for t in (q, k, v, z)]
        return torch.cat(groups, dim=1).reshape(-1, hidden)


def _block_suffix(gguf_name: str) -> str:
    return gguf_name.split(".", 2)[2] if gguf_name.startswith("blk.") else gguf_name


def unpermute_rope_rows(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """llama.cpp stores each head's q/k rows as interleaved pairs (0, D/2, 1, D/2 + 1, ...); HF keeps
    them as two halves (rotate_half). Works for weights [H * D, in] and biases [H * D]."""
    return x.reshape(num_heads, x.shape[0] // num_heads // 2, 2, *x.shape[1:]).transpose(1, 2).reshape(x.shape)
