"""Qwen4-Exp's GGUF metadata (llama.cpp's `qwen4exp` keys, read as its src/models/qwen4exp.cpp reads them)
-> the HF config fields Strata's model takes, checked when the file opens: a bad value is a ValueError
naming the file and the key or tensor, before any weight loads.

PLE's hash constants: the file stores them as arrays (ple.layer_multipliers, ple.head_offsets,
ple.head_vocab_sizes); Strata's model derives them from its config (strata.model.ple, HF's formulas). The
config is chosen to give the file's arrays: ngram_vocab_size_base is the first head's size (the heads hash
modulo consecutive primes from it), the padding multiple is one that gives the table's row count. The seed
cannot be recovered from the multipliers (they are a hash taken modulo a bound), so it is HF's default, and a
file whose arrays are not what that config derives is refused, naming the array, rather than hashed otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

from strata.model.registry import hash_multipliers, head_vocab_sizes

ARCH = "qwen4exp"
PLE_TABLE = "per_layer_token_embd.weight"
DEFAULT_SEED = 1234  # HF's Qwen4ExpTextConfig.seed: the one the hash multipliers are checked against
_BROKEN = "the file is corrupt or its converter is broken: convert the model again"

logger = logging.getLogger(__name__)


def qwen4exp_config(path: str, metadata: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                    cfg: dict[str, Any]) -> dict[str, Any]:
    """The Qwen4-Exp fields of the HF config dict `cfg` (built from the common keys; layer_types from the
    blocks that have ssm tensors). shapes: every tensor's GGUF shape (ne order: row length first)."""
    meta = _Metadata(path, metadata)
    hc_count, low_rank = meta.get("hyper_connection.count"), meta.get("hyper_connection.low_rank")
    meta.need(isinstance(hc_count, int) and hc_count > 1, "hyper_connection.count",
              f"must be greater than one (got {hc_count!r}): hyper-connections mix several residual streams; "
              f"{_BROKEN}")
    meta.need(isinstance(low_rank, int) and low_rank > 0, "hyper_connection.low_rank",
              f"must be a positive integer (got {low_rank!r}); {_BROKEN}")
    # llama.cpp's qwen4exp graph gates the Gated DeltaNet output with a sigmoid (Qwen3.5's: silu)
    fields: dict[str, Any] = dict(hc_count=hc_count, hc_lowrank=low_rank, output_gate_type="sigmoid")
    fields.update(_qsa_fields(meta, shapes, cfg))
    fields.update(_ple_fields(meta, shapes, cfg))
    return fields


class _Metadata:
    def __init__(self, path: str, metadata: dict[str, Any]) -> None:
        self.path, self.metadata = path, metadata

    def get(self, name: str, default: Any = None) -> Any:
        return self.metadata.get(f"{ARCH}.{name}", default)

    def need(self, ok: bool, name: str, why: str) -> None:
        """name: a metadata key below `qwen4exp.`, or a tensor name (ending in .weight)."""
        if not ok:
            what = name if name.endswith(".weight") else f"{ARCH}.{name}"
            raise ValueError(f"{self.path}: {what} {why}")


def _qsa_fields(meta: _Metadata, shapes: dict, cfg: dict) -> dict[str, Any]:
    """QSA on every attention layer, or none: llama.cpp attends densely on a layer without an indexer or whose
    compress ratio is 0. Its converter writes 0 on every layer when transformers >= 5.24 loads the config (which
    names those layers `indexed_attention` where the converter looks for `full_attention`); such a file runs dense
    attention here too, with a notice: its indexers are kept (`strata quantize` writes them again, as llama.cpp's
    loader requires) but unread (compress ratio 0 in the config)."""
    num_layers = cfg["num_hidden_layers"]
    attention = [i for i, kind in enumerate(cfg["layer_types"]) if kind != "linear_attention"]
    indexed = [i for i in attention if f"blk.{i}.indexer.k_proj.weight" in shapes]
    if not indexed:
        return {}
    missing = [i for i in attention if i not in indexed]
    meta.need(not missing, f"blk.{missing[0] if missing else 0}.indexer.k_proj.weight",
              f"is missing: Strata runs QSA on every attention layer or none, and layers {indexed} have indexers")
    ratios = meta.get("attention.compress_ratios")
    ratios = ratios if isinstance(ratios, list) else [ratios] * num_layers
    meta.need(len(ratios) >= num_layers, "attention.compress_ratios",
              f"has {len(ratios)} entries for {num_layers} layers; {_BROKEN}")
    used = sorted({ratios[i] for i in attention})
    if used == [0]:
        logger.warning("%s: %s.attention.compress_ratios is 0 on every attention layer, so they attend densely "
                       "(as llama.cpp runs this file) and their QSA indexers go unread. llama.cpp's converter "
                       "writes this for a config whose layer_types say indexed_attention rather than "
                       "full_attention: to run QSA, convert with full_attention there.", meta.path, ARCH)
    else:
        meta.need(len(used) == 1 and isinstance(used[0], int) and used[0] > 0, "attention.compress_ratios",
                  f"gives the attention layers ratios {used}; Strata runs one QSA compress ratio > 0 on all of "
                  f"them, or none")
    qsa = {}
    for name, key in (("indexer_n_heads", "head_count"), ("indexer_head_dim", "key_length"),
                      ("indexer_budget", "top_k")):
        qsa[name] = meta.get(f"attention.indexer.{key}")
        meta.need(isinstance(qsa[name], int) and qsa[name] > 0, f"attention.indexer.{key}",
                  f"must be a positive integer (got {qsa[name]!r}); {_BROKEN}")
    layer_types = [kind if kind == "linear_attention" else "indexed_attention" for kind in cfg["layer_types"]]
    return dict(**qsa, indexer_kv_heads=1, indexer_compress_ratio=used[0], layer_types=layer_types)


def _ple_fields(meta: _Metadata, shapes: dict, cfg: dict) -> dict[str, Any]:
    """PLE's config fields: the ones that derive the file's hash arrays and table shape (module docstring)."""
    layers = meta.get("ple.layers")
    if not layers:
        return {}
    layers = layers if isinstance(layers, list) else [layers]
    meta.need(len(layers) == 1, "ple.layers",
              f"lists {len(layers)} layers; a file holds one n-gram table and one set of hash constants")
    minimum = {"ple.ngram_size": 2, "ple.heads_per_ngram": 1, "ple.conv_kernel": 1,
               "embedding_length_per_layer_input": 1, "ple.eos_token_id": 0}
    value = {name: meta.get(name) for name in minimum}
    for name, low in minimum.items():
        meta.need(isinstance(value[name], int) and value[name] >= low, name,
                  f"must be an integer >= {low} (got {value[name]!r}); {_BROKEN}")
    ngram, per_ngram, row_dim, eos = (value[name] for name in ("ple.ngram_size", "ple.heads_per_ngram",
                                                                "embedding_length_per_layer_input", "ple.eos_token_id"))
    heads = (ngram - 1) * per_ngram
    arrays = {}
    for name, length in (("ple.layer_multipliers", ngram), ("ple.head_offsets", heads),
                         ("ple.head_vocab_sizes", heads)):
        values = meta.get(name)
        meta.need(isinstance(values, list) and len(values) >= length, name,
                  f"has {len(values) if isinstance(values, list) else 0} entries, but at least {length} are "
                  f"required; {_BROKEN}")
        arrays[name] = values[:length]
    offsets, sizes = arrays["ple.head_offsets"], arrays["ple.head_vocab_sizes"]
    table = shapes.get(PLE_TABLE)
    meta.need(table is not None and len(table) == 2, PLE_TABLE, f"is missing, or not a 2-D table; {_BROKEN}")
    meta.need(table[0] == row_dim, PLE_TABLE, f"has rows of {table[0]} values, but "
              f"{ARCH}.embedding_length_per_layer_input says {row_dim}; {_BROKEN}")
    needed = max(o + s for o, s in zip(offsets, sizes))
    meta.need(table[1] >= needed, PLE_TABLE,
              f"has {table[1]} rows, too few for the PLE head ranges ({needed}); {_BROKEN}")
    base = sizes[0]
    meta.need(head_vocab_sizes(base, 0, heads) == sizes, "ple.head_vocab_sizes",
              f"is {sizes}, not consecutive primes from {base} (what Strata derives the heads' moduli as)")
    meta.need(offsets == [sum(sizes[:h]) for h in range(heads)], "ple.head_offsets",
              f"is {offsets}, not the heads' ranges one after the other (what Strata derives)")
    expected = hash_multipliers(cfg["vocab_size"], ngram, 0, DEFAULT_SEED)
    meta.need(arrays["ple.layer_multipliers"] == expected, "ple.layer_multipliers",
              f"is {arrays['ple.layer_multipliers']}, not the multipliers HF's default seed {DEFAULT_SEED} gives "
              f"for {cfg['vocab_size']} tokens ({expected}); Strata derives them from the config and cannot take "
              f"another seed's")
    others = cfg.get("eos_token_id") or []
    return dict(ple_layer_ids=[layers[0] + 1], ple_embed_dim=row_dim * heads, ngram_size=ngram,
                heads_per_ngram=per_ngram, ple_conv_kernel_size=value["ple.conv_kernel"],
                ngram_vocab_size_base=base, make_ngram_vocab_size_divisible_by=_padding_multiple(sum(sizes), table[1]),
                seed=DEFAULT_SEED, split_ngram_parts=1,
                # PLE's n-grams are cut at the model's first EOS id
                eos_token_id=[eos, *(e for e in others if e != eos)])


def _padding_multiple(total: int, rows: int) -> int:
    """HF pads the table's `total` rows up to a multiple of make_ngram_vocab_size_divisible_by: the largest
    power of two that gives the file's `rows` (HF's default 128, or a test's 16), else `rows` itself."""
    for bits in range(rows.bit_length(), -1, -1):
        if -(-total // (1 << bits)) * (1 << bits) == rows:
            return 1 << bits
    return rows
