"""What gguf_writer does beyond Qwen3.5-MoE for Qwen4-Exp (llama.cpp's `qwen4exp`, its converter
conversion/qwen4exp.py Qwen4ExpTextModel): the names and metadata keys of hyper-connections, QSA's indexer,
PLE and the MTP head's fused projection and mixer, and the tensor changes its converter makes on top of
Qwen3.5's (indexer q/k split, PLE's norms + 1, the n-gram table's shards joined, fc_embedding | fc_hidden
fused into eh_proj). The installed gguf-py (0.19) has no QWEN4EXP: these names and keys are spelled here
from llama.cpp's gguf-py constants.py (TENSOR_NAMES of the HC_*, INDEXER_*, PLE_*, PER_LAYER_TOKEN_EMBD and
NEXTN_HC_HEAD_* members; Keys.HyperConnection, Keys.Attention.Indexer, Keys.PerLayerEmbedding), and the
shared tensors take Qwen3.5-MoE's names, which are qwen4exp's.

PLE's hash constants are written from the config through strata.model.ple (HF's formulas, the values of the
checkpoint's int64 buffers the converter copies), so a Strata model's state, which has no such buffers,
writes the same file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import gguf
import torch

ARCH = "qwen4exp"
# HF name (after the writer's MTP renaming: the MTP block is layer L) -> llama.cpp name
_NAMES = [(re.compile(pattern), name) for pattern, name in (
    (r"^model\.hyper_connection_mixer\.(?P<w>hc_norm|input_mix_weight_down|input_mix_weight_up)\.weight$",
     "output_hc_{w}.weight"),
    (r"^model\.layers\.(?P<b>\d+)\.(?P<site>attn|mlp)_hyper_connection\.(?P<w>\w+)\.weight$",
     "blk.{b}.hc_{site}_{w}.weight"),
    (r"^model\.layers\.(?P<b>\d+)\.hyper_connection_mixer\.(?P<w>\w+)\.weight$", "blk.{b}.nextn.hc_head_{w}.weight"),
    (r"^model\.layers\.(?P<b>\d+)\.self_attn\.indexer\.(?P<w>q|k)_layernorm\.weight$",
     "blk.{b}.indexer.{w}_norm.weight"),
    (r"^model\.layers\.(?P<b>\d+)\.ple\.(?P<w>key_proj|value_proj|norm_key|norm_query|norm_conv|conv1d)\.weight$",
     "blk.{b}.ple_{w}.weight"),
    (r"^model\.layers\.\d+\.ple\.ple_embedding\.ngram_embedding\.weight$", "per_layer_token_embd.weight"),
)]
_SHORT = {"input_mix_weight_down": "down", "input_mix_weight_up": "up", "block_inject_weight": "inject",
          "hc_norm": "norm", "mlp": "ffn", "key_proj": "key", "value_proj": "value"}
_HASH_BUFFERS = re.compile(r"\.ple_embedding\.(layer_multipliers|ngram_heads_offsets|ngram_heads_vocab_sizes)$")
_TABLE_SHARD = re.compile(r"^(?P<table>.*\.ngram_embedding)\.shard_(?P<i>\d+)\.weight$")
_MTP_FC = ("mtp.fc_embedding.weight", "mtp.fc_hidden.weight")  # eh_proj's column blocks, in this order
_PLE_NORMS = (".ple.norm_key.weight", ".ple.norm_query.weight", ".ple.norm_conv.weight")


def gguf_name(name: str) -> str | None:
    """The llama.cpp name of a Qwen4-Exp-only tensor, None for the ones it shares with Qwen3.5-MoE."""
    for pattern, template in _NAMES:
        if m := pattern.match(name):
            return template.format(**{k: _SHORT.get(v, v) for k, v in m.groupdict().items()})
    return None


def hf_stream(cfg: dict, items, cat) -> Iterator[tuple[str, Any]]:
    """The HF (name, tensor) pairs as the shared path takes them: hash buffers dropped (they are metadata),
    the n-gram table's shards joined in index order (the real one's are ~100 GB: one table, as llama.cpp's),
    the MTP head's fc_embedding and fc_hidden joined side by side as the MTP block's eh_proj [D, 2D], its
    own mixer renamed into that block. cat(parts, dim): the writer's meta-safe torch.cat."""
    num_layers = cfg["num_hidden_layers"]
    shards: dict[str, dict[int, torch.Tensor]] = {}
    fc: dict[str, torch.Tensor] = {}
    for name, tensor in items:
        if _HASH_BUFFERS.search(name):
            continue
        if m := _TABLE_SHARD.match(name):
            table = shards.setdefault(m.group("table"), {})
            table[int(m.group("i"))] = tensor
            if len(table) == cfg.get("split_ngram_parts", 1):
                yield m.group("table") + ".weight", cat([table[i] for i in sorted(table)], 0)
            continue
        if name in _MTP_FC:
            fc[name] = tensor
            if len(fc) == 2:
                yield f"model.layers.{num_layers}.eh_proj.weight", cat([fc[n] for n in _MTP_FC], 1)
            continue
        if name.startswith("mtp.hyper_connection_mixer."):
            name = f"model.layers.{num_layers}." + name.removeprefix("mtp.")
        yield name, tensor
    if len(fc) == 1 or any(len(t) != cfg.get("split_ngram_parts", 1) for t in shards.values()):
        raise ValueError(f"Qwen4-Exp checkpoint incomplete: MTP projections {sorted(fc)} (needs both "
                         f"{' and '.join(_MTP_FC)}), n-gram table shards {[sorted(t) for t in shards.values()]}")


def convert(cfg: dict, name: str, t: torch.Tensor, values) -> Iterator[tuple[str, torch.Tensor]] | None:
    """Qwen4ExpTextModel.modify_tensors' own cases: the indexer's q/k split, PLE's norms + 1; None for the
    tensors Qwen3.5's rules convert. values(t, change): the writer's meta-safe value change."""
    if name.endswith(".self_attn.indexer.index_qk_proj.weight"):
        layer, queries = int(name.split(".")[2]), cfg["indexer_n_heads"] * cfg["indexer_head_dim"]
        return iter([(f"blk.{layer}.indexer.q_proj.weight", t[:queries]),
                     (f"blk.{layer}.indexer.k_proj.weight", t[queries:])])
    if name.endswith(_PLE_NORMS):
        return iter([(gguf_name(name), values(t, lambda w: w + 1))])
    return None


def write_metadata(w: gguf.GGUFWriter, cfg: dict, block_count: int) -> None:
    """Qwen4ExpTextModel.set_gguf_parameters' own keys (the common and Qwen3.5 ones are the writer's)."""
    from strata.config import ModelConfig

    model = ModelConfig.from_hf(cfg)
    w.add_uint32(f"{ARCH}.hyper_connection.count", model.hc_count)
    w.add_uint32(f"{ARCH}.hyper_connection.low_rank", model.hc_lowrank)
    if model.indexer_n_heads:
        w.add_uint32(gguf.Keys.Attention.Indexer.HEAD_COUNT.format(arch=ARCH), model.indexer_n_heads)
        w.add_uint32(gguf.Keys.Attention.Indexer.KEY_LENGTH.format(arch=ARCH), model.indexer_head_dim)
        w.add_uint32(gguf.Keys.Attention.Indexer.TOP_K.format(arch=ARCH), model.indexer_budget)
        # per block, MTP blocks included (they attend densely: ratio 0, as linear layers)
        ratios = [0 if model.is_linear_attention_layer(i) else model.indexer_compress_ratio
                  for i in range(model.num_hidden_layers)]
        w.add_array(f"{ARCH}.attention.compress_ratios", ratios + [0] * (block_count - len(ratios)))
    if model.ple_layers:
        _write_ple_metadata(w, cfg, model)


def _write_ple_metadata(w: gguf.GGUFWriter, cfg: dict, model) -> None:
    from strata.model.registry import hash_multipliers, head_vocab_sizes

    if len(model.ple_layers) != 1:
        raise ValueError(f"Qwen4-Exp has PLE on layers {list(model.ple_layers)}; llama.cpp's qwen4exp holds one "
                         f"PLE layer (one table, one set of hash constants)")
    heads = model.ngram_heads
    sizes = head_vocab_sizes(model.ngram_vocab_size_base, 0, heads)
    eos = cfg.get("eos_token_id")
    w.add_array(f"{ARCH}.ple.layers", list(model.ple_layers))
    w.add_uint32(f"{ARCH}.ple.ngram_size", model.ngram_size)
    w.add_uint32(f"{ARCH}.ple.heads_per_ngram", model.heads_per_ngram)
    w.add_uint32(f"{ARCH}.ple.conv_kernel", model.ple_conv_kernel_size)
    # the converter's choice (HF's model resets its n-grams on eos[0]: they differ for a list of several)
    w.add_uint32(f"{ARCH}.ple.eos_token_id", eos[-1] if isinstance(eos, list) else eos)
    if cfg.get("image_token_id") is not None:
        w.add_uint32(f"{ARCH}.ple.image_token_id", cfg["image_token_id"])
    w.add_embedding_length_per_layer_input(model.ple_embed_dim // heads)
    # 45-bit multipliers: uint64 arrays, as the converter writes them
    uint64 = gguf.GGUFValueType.UINT64
    multipliers = hash_multipliers(model.vocab_size, model.ngram_size, 0, model.ngram_seed)
    for key, values in (("layer_multipliers", multipliers), ("head_offsets", [sum(sizes[:h]) for h in range(heads)]),
                        ("head_vocab_sizes", sizes)):
        w.add_key_value(f"{ARCH}.ple.{key}", values, gguf.GGUFValueType.ARRAY, sub_type=uint64)
