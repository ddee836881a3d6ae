"""A GGUF model (llama.cpp's format; one file or the parts of a split one) as a weight source.

Inverts llama.cpp's convert_hf_to_gguf.py twice: GGUF metadata -> an HF config.json dict, and
llama.cpp tensor names and layouts -> HF checkpoint names and layouts (see gguf_names.py).
Weights of the model's linear layers and embeddings (strata.model.packed.keeps_packed) in a block type
kept packed (gguf_blocks.PACKED_TYPE_NAMES: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_XS, IQ4_NL, MXFP4, the
i-quants) stream out as PackedWeights over the file's mmap: no float copy, and a copy of the packed bytes only where
llama.cpp permuted rows; so do lookup-only tables (Qwen4-Exp's n-gram table) in any type with a reference
dequantization (loaded_sizes.keeps_blocks: also F32 / F16 / BF16 and IQ4_NL), whose rows are dequantized as
they are looked up. The routed experts stream out as PackedExpertWeights when every MoE layer's are packable
(`experts_packed`; gate and up of one type, joined by a copy of their blocks, or of two types with an exact
common one, such as Q4_K and Q5_K, the narrower part promoted to it (block_promotion); down of any kept type, such
as a Q4_K_M file's Q5_0 down rows of 640), else all dense. Everything else is dequantized with gguf-py one
tensor at a time (peak extra memory about one float32 tensor), with one notice per block type that is not
kept packed. Shapes are not checked here: a tensor that does not fit is the model loader's to report.
Qwen4-Exp's metadata is checked when the file opens (gguf_qwen4exp.py).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from strata import progress
from strata.config import ModelConfig, rope_attention_factor
from strata.types import WeightSizes
from strata.weights.block_promotion import promote
from strata.weights.loaded_sizes import (TensorEntry, expert_types, is_lookup_table, keeps_blocks, loaded_sizes,
                                         why_experts_dense)
from strata.kernels.gguf_blocks import DENSE_TYPE_NAMES, PACKED_TYPE_NAMES, is_packed_type
from strata.model.registry import PackedExpertWeight, PackedWeight, is_packed_expert_stack
from strata.weights.gguf_file import open_parts
from strata.weights.gguf_names import (GGUF_ARCHITECTURES, HYBRID_ARCHITECTURES, SKIPPED_TENSORS, HFPiece,
                                      TensorInverter, hf_pieces)
from strata.weights.gguf_qwen4exp import qwen4exp_config

logger = logging.getLogger(__name__)

_ARRAY_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                 "tokenizer.ggml.scores")
_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
# why a tensor of a block type was dequantized at load (the notice's reason)
_NOT_KEPT = f"not kept packed (types kept packed: {', '.join(PACKED_TYPE_NAMES)})"
_NOT_ROW_WISE = "not kept packed: llama.cpp changed their layout beyond reordering rows"


class GGUFSource:
    def __init__(self, path: str) -> None:
        self.path = path
        self.description = path
        with progress.status(f"reading the metadata of {path}"):  # seconds for a large vocabulary
            self.readers = open_parts(path)
        self.reader = self.readers[0]  # part 1: the metadata
        self.fields = {}
        for reader in self.readers:
            for name, field in reader.fields.items():
                self.fields.setdefault(name, field)
        # contents() of the token arrays would build ~150k Python strings; only their count is used
        self.metadata = {name: _value(field) for name, field in self.fields.items() if name not in _ARRAY_FIELDS}
        self.arch = self.metadata.get("general.architecture")
        if self.arch not in GGUF_ARCHITECTURES:
            raise ValueError(f"{path}: unsupported GGUF architecture {self.arch!r}; supported: "
                             f"{', '.join(GGUF_ARCHITECTURES)}")
        self.gguf_tensors = [(reader.path, t) for reader in self.readers for t in reader.tensors]
        self.tensor_names = {t.name for _, t in self.gguf_tensors}
        if len(self.tensor_names) != len(self.gguf_tensors):
            twice = sorted(name for name, n in Counter(t.name for _, t in self.gguf_tensors).items() if n > 1)
            raise ValueError(f"{path}: tensor {twice[0]!r} is in more than one part of the split GGUF; the parts "
                             f"come from different splits: download them again")
        self.hf_config = self._hf_config()
        self._drop_vocabulary()
        self.inverter = TensorInverter(self.arch, self.hf_config)
        self.plan = self._plan(self.hf_config["num_hidden_layers"])
        entries = self._entries()
        self.experts_dense_reason = why_experts_dense(entries)
        self.experts_packed = self.experts_dense_reason is None
        self.expert_types = expert_types(entries)  # the type each expert stack loads as (its parts' common type)
        # the PLE n-gram tables load as their blocks (PackedEmbedding): the model never allocates them dense
        self.lookup_tables_packed = any(keeps_blocks(piece.hf_name, int(tensor.tensor_type))
                                        for _, tensor, piece in self.plan if is_lookup_table(piece.hf_name))

    # ---- WeightSource ---------------------------------------------------------------------------

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_hf(self.hf_config)

    def num_tensors(self) -> int:
        return len({piece.hf_name for _, _, piece in self.plan})

    def weight_sizes(self, dtype: torch.dtype, owned: range | None = None) -> WeightSizes:
        """The weights' bytes as they will load (strata.weights.loaded_sizes); `owned`: a pipeline stage's
        layers (the others' are left out)."""
        from strata.model.registry import outside_stage

        cfg = self.model_config()
        entries = [e for e in self._entries() if not outside_stage(e.hf_name, owned, cfg)]
        return loaded_sizes(entries, dtype, self.experts_packed)

    def bytes_by_type(self) -> dict[int, int]:
        """qtype -> the file's bytes of that type in the tensors the model multiplies (every layer's: a pipeline
        stage's process decides --cpu-matmul auto as the others do). Tables it only gathers rows from are left out:
        Qwen4-Exp's PLE table (28.8 GB of IQ4_NL in the real Q4_K_M file, whose experts are Q4_K beside llama.cpp's
        Q5_0 / Q8_0 fallbacks for their 640-wide down rows) and the token embeddings of a file with its own LM head."""
        entries = self._entries()
        gathered = {"per_layer_token_embd.weight"}
        if any(entry.gguf_name == "output.weight" for entry in entries):  # else token_embd is the tied LM head
            gathered.add("token_embd.weight")
        totals: dict[int, int] = {}
        for entry in entries:
            if entry.gguf_name not in gathered:
                totals[entry.qtype] = totals.get(entry.qtype, 0) + entry.nbytes
        return totals

    def _entries(self) -> list[TensorEntry]:
        return [TensorEntry(tensor.name, piece.hf_name, int(tensor.n_elements) // piece.share,
                            int(tensor.shape[-1]) if len(tensor.shape) == 3 else 0, int(tensor.tensor_type),
                            int(tensor.n_bytes) // piece.share, self.inverter.is_row_wise(tensor.name))
                for _, tensor, piece in self.plan]

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor | PackedWeight | PackedExpertWeight]]:
        """(HF name, tensor in `dtype` or PackedWeight) pairs; then one notice per block type dequantized."""
        dequantized: Counter[tuple[str, str]] = Counter()  # (type name, reason) -> tensors
        pending: dict[str, list[torch.Tensor | PackedWeight | None]] = {}
        for path, tensor, piece in self.plan:
            values = self._values(path, tensor, piece, dtype, dequantized)
            if piece.num_parts == 1:
                yield piece.hf_name, values
                continue
            # llama.cpp split this HF tensor in parts (gate/up experts, qkv/z); hold parts until all came
            parts = pending.setdefault(piece.hf_name, [None] * piece.num_parts)
            parts[piece.part] = values
            if all(p is not None for p in parts):
                del pending[piece.hf_name]
                yield piece.hf_name, self._join(piece.hf_name, parts, dtype)
        if self.experts_dense_reason:
            logger.warning("the routed experts loaded dequantized to %s: %s", str(dtype).removeprefix("torch."),
                           self.experts_dense_reason)
        for (type_name, reason), count in dequantized.items():
            logger.warning("loaded %d tensors of type %s dequantized to %s: %s", count, type_name,
                           str(dtype).removeprefix("torch."), reason)

    # ---- tensors --------------------------------------------------------------------------------

    def _plan(self, num_layers: int) -> list[tuple[str, Any, HFPiece]]:
        plan, parts_seen = [], {}
        ple_layers = [i - 1 for i in self.hf_config.get("ple_layer_ids") or ()]
        for path, tensor in self.gguf_tensors:
            if tensor.name in SKIPPED_TENSORS:
                continue
            pieces = hf_pieces(self.arch, tensor.name, num_layers, ple_layers[0] if ple_layers else None)
            if pieces is None:
                raise ValueError(f"{path}: tensor {tensor.name!r} has no HF equivalent in a {self.arch} "
                                 f"model; the file may come from a newer llama.cpp than Strata knows")
            for piece in pieces:
                plan.append((path, tensor, piece))
                parts_seen.setdefault(piece.hf_name, set()).add(piece.part)
        for _, _, piece in plan:
            if len(parts_seen[piece.hf_name]) != piece.num_parts:
                raise ValueError(f"{self.path}: {piece.hf_name} is stored in {piece.num_parts} GGUF tensors, "
                                 f"but only {len(parts_seen[piece.hf_name])} of them are in the file")
        return plan

    def _values(self, path: str, tensor, piece: HFPiece, dtype: torch.dtype,
                dequantized: Counter) -> torch.Tensor | PackedWeight | PackedExpertWeight:
        """One GGUF tensor (or one column piece of it) in HF layout: packed where the model takes it so,
        else dense in `dtype`."""
        qtype, hf_name = int(tensor.tensor_type), piece.hf_name
        if self.experts_packed and is_packed_expert_stack(hf_name):
            # [E, N, row bytes], a view of the file (experts_packed checked type and layout), or a copy in the type
            # the stack's other part has (gate and up of different types: block_promotion)
            blocks, target = torch.from_numpy(tensor.data), self.expert_types[hf_name]
            return PackedExpertWeight(promote(blocks, qtype, target), target, int(tensor.shape[0]))
        if piece.columns is None and keeps_blocks(hf_name, qtype) and tensor.data.ndim == 2:
            if self.inverter.is_row_wise(tensor.name):
                # a view of the file; a dense type's values as their bytes
                blocks = torch.from_numpy(np.asarray(tensor.data).view(np.uint8))
                weight = PackedWeight(blocks, qtype, int(tensor.shape[0]))
                order = self.inverter.row_order(tensor.name, weight.shape[0])
                return weight if order is None else weight.take_rows(order)
            dequantized[tensor.tensor_type.name, _NOT_ROW_WISE] += 1
        elif not is_packed_type(qtype) and tensor.tensor_type.name not in DENSE_TYPE_NAMES:
            dequantized[tensor.tensor_type.name, _NOT_KEPT] += 1
        # Also dense: the MoE router, norms, and the routed experts of a file where not all of them can stay packed
        values = self.inverter.transform(tensor.name, self._dequantize(path, tensor))
        if piece.columns is not None:
            index, count = piece.columns
            values = values.chunk(count, dim=1)[index]
        return values.to(dtype)

    def _join(self, hf_name: str, parts: list, dtype: torch.dtype) -> torch.Tensor | PackedWeight:
        """Parts llama.cpp split one HF tensor into -> that tensor: packed row by row where all parts are packed
        (of one type or several), else dense."""
        if all(isinstance(p, PackedExpertWeight) for p in parts):
            return PackedExpertWeight.cat_rows(parts)  # [E, I, .] x 2 -> [E, 2I, .]: gate rows, then up rows
        if all(isinstance(p, PackedWeight) for p in parts):
            joined = PackedWeight.cat_rows(parts)
            order = self.inverter.join_order(hf_name, [p.shape[0] for p in parts])
            if torch.equal(order, torch.arange(order.numel())):
                return joined  # the parts one after the other (Qwen4-Exp's indexer q / k): their segments
            # one type: the rows copied into one segment in order; several (interleaved by the order): the
            # segments kept and the product's columns gathered
            return joined.take_rows(order) if len(set(joined.qtypes)) == 1 else joined.reordered(order)
        parts = [p.dequantize(torch.float32) if isinstance(p, PackedWeight) else p for p in parts]
        return self.inverter.join(hf_name, parts).to(dtype)

    def _dequantize(self, path: str, tensor) -> torch.Tensor:
        from gguf.quants import dequantize

        try:
            array = dequantize(tensor.data, tensor.tensor_type)  # float32 in HF (row-major) shape
        except NotImplementedError as e:
            raise ValueError(f"{path}: tensor {tensor.name!r} is {tensor.tensor_type.name}, which the "
                             f"installed gguf package cannot dequantize ({e}); upgrade gguf") from e
        # F32 tensors come back as views of the file's copy-on-write map: writable, never written back
        return torch.from_numpy(array.astype(np.float32, copy=False))

    # ---- metadata -------------------------------------------------------------------------------

    def _get(self, key: str, default: Any = None) -> Any:
        value = self.metadata.get(f"{self.arch}.{key}", default)
        # some converters write per-layer arrays (e.g. head_count_kv); the model takes one value
        return max(value) if isinstance(value, list) and value else value

    def _hf_config(self) -> dict[str, Any]:
        get, names = self._get, self.tensor_names
        num_heads = get("attention.head_count")
        hidden_size = get("embedding_length")
        if num_heads is None or hidden_size is None or get("block_count") is None:
            raise ValueError(f"{self.path}: GGUF metadata lacks {self.arch}.block_count, .embedding_length or "
                             f".attention.head_count")
        head_dim = get("attention.key_length") or hidden_size // num_heads
        num_mtp = get("nextn_predict_layers", 0)
        num_layers = get("block_count") - num_mtp  # llama.cpp appends MTP blocks after the decoder's
        eos_ids = list(dict.fromkeys(self.metadata[k] for k in _EOS_KEYS if k in self.metadata))
        cfg: dict[str, Any] = {
            "architectures": [GGUF_ARCHITECTURES[self.arch]],
            "vocab_size": get("vocab_size") or self._token_count(),
            "hidden_size": hidden_size,
            "intermediate_size": get("feed_forward_length", 0),
            "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads,
            "num_key_value_heads": get("attention.head_count_kv", num_heads),
            "head_dim": head_dim,
            "rms_norm_eps": get("attention.layer_norm_rms_epsilon", 1e-6),
            "rope_theta": get("rope.freq_base", 10000.0),
            "partial_rotary_factor": get("rope.dimension_count", head_dim) / head_dim,
            "max_position_embeddings": get("context_length", 4096),
            "tie_word_embeddings": "output.weight" not in names,
            "attention_bias": any(name.endswith(".attn_q.bias") for name in names),
            "bos_token_id": self.metadata.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": eos_ids,
            "num_nextn_predict_layers": num_mtp,
        }
        rope_scaling = self._rope_scaling(cfg)
        if rope_scaling:
            cfg["rope_scaling"] = rope_scaling
        if get("expert_count"):
            cfg.update(
                num_experts=get("expert_count"), num_experts_per_tok=get("expert_used_count"),
                moe_intermediate_size=get("expert_feed_forward_length", 0),
                shared_expert_intermediate_size=get("expert_shared_feed_forward_length", 0),
                # llama.cpp's qwen3moe / qwen3next graphs renormalise the top-k weights unless told otherwise
                norm_topk_prob=bool(get("expert_weights_norm", True)),
                mlp_only_layers=[i for i in range(num_layers) if f"blk.{i}.ffn_gate_inp.weight" not in names])
        if self.arch in HYBRID_ARCHITECTURES:
            num_k_heads, num_v_heads = get("ssm.group_count"), get("ssm.time_step_rank")
            cfg.update(
                linear_conv_kernel_dim=get("ssm.conv_kernel"), linear_key_head_dim=get("ssm.state_size"),
                linear_num_key_heads=num_k_heads, linear_num_value_heads=num_v_heads,
                linear_value_head_dim=get("ssm.inner_size") // num_v_heads,
                layer_types=["linear_attention" if f"blk.{i}.ssm_a" in names else "full_attention"
                             for i in range(num_layers)])
            if self.arch != "qwen3next" and num_k_heads != num_v_heads:
                # llama.cpp's Qwen3.5 files store the value heads tiled over the key heads (gguf_names.py)
                cfg["linear_value_heads_tiled"] = True
        if self.arch == "qwen4exp":
            shapes = {t.name: tuple(int(d) for d in t.shape) for _, t in self.gguf_tensors}
            cfg.update(qwen4exp_config(self.path, self.metadata, shapes, cfg))
        return cfg

    def _drop_vocabulary(self) -> None:
        """gguf-py parsed the vocabulary into ~100k small arrays (~150 MiB for a 49k-token vocabulary);
        free them before the weights load (the tokenizer reads the file itself)."""
        for fields in (self.fields, *(reader.fields for reader in self.readers)):
            for name in _ARRAY_FIELDS:
                fields.pop(name, None)

    def _token_count(self) -> int:
        tokens = self.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise ValueError(f"{self.path}: GGUF metadata has neither {self.arch}.vocab_size nor a token list")
        return len(tokens.data)

    def _rope_scaling(self, cfg: dict[str, Any]) -> dict[str, Any] | None:
        if "rope_freqs.weight" in self.tensor_names:
            tensor = next(t for _, t in self.gguf_tensors if t.name == "rope_freqs.weight")
            rot_dim = round(cfg["head_dim"] * cfg["partial_rotary_factor"])
            return llama3_rope_scaling(np.asarray(tensor.data, dtype=np.float64), cfg["rope_theta"], rot_dim,
                                       self.path)
        rope_type = self._get("rope.scaling.type")
        if rope_type in (None, "none"):
            return None
        scaling = {"rope_type": rope_type, "factor": self._get("rope.scaling.factor", 1.0)}
        if (original := self._get("rope.scaling.original_context_length")) is not None:
            scaling["original_max_position_embeddings"] = original
        if rope_type == "yarn":
            scaling.update(self._yarn_parameters(scaling))
        return scaling

    def _yarn_parameters(self, scaling: dict[str, Any]) -> dict[str, Any]:
        """llama.cpp's optional YaRN keys as HF rope parameters: yarn_attn_factor is HF's attention_factor
        (convert_hf_to_gguf.py writes it so), yarn_log_multiplier 0.1 * mscale_all_dim with mscale 1 (as
        llama.cpp reads it for these archs), attn_factor a multiplier on the resulting magnitude."""
        ext_factor = self._get("rope.scaling.yarn_ext_factor")
        if ext_factor is not None and ext_factor != 1.0:
            raise ValueError(f"{self.path}: {self.arch}.rope.scaling.yarn_ext_factor = {ext_factor} is not supported "
                             f"(Strata computes YaRN as HF transformers does: ext_factor 1)")
        params: dict[str, Any] = {}
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                          ("yarn_attn_factor", "attention_factor")):
            if (value := self._get(f"rope.scaling.{key}")) is not None:
                params[name] = value
        if (log_mul := self._get("rope.scaling.yarn_log_multiplier")) and "attention_factor" not in params:
            params.update(mscale=1.0, mscale_all_dim=log_mul / 0.1)
        if (attn_factor := self._get("rope.scaling.attn_factor")) is not None and attn_factor != 1.0:
            params["attention_factor"] = rope_attention_factor({**scaling, **params}) * attn_factor
        return params


def llama3_rope_scaling(freq_factors: np.ndarray, theta: float, rot_dim: int, path: str,
                        original_context: int = 8192) -> dict[str, Any]:
    """llama.cpp stores Llama-3 rope scaling as per-frequency divisors (`rope_freqs.weight`): 1 for high
    frequencies, `factor` for low ones, 1 / ((1 - s) / factor + s) between, with s linear in
    1 / wavelength. Recover (factor, low_freq_factor, high_freq_factor) by fitting that line; any
    original context length gives the same frequencies once the two factors are fitted for it."""
    inv_freq = 1.0 / theta ** (np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)
    factor = float(freq_factors.max())
    between = (freq_factors > 1 + 1e-4) & (freq_factors < factor - 1e-4)
    if between.sum() < 2:
        raise ValueError(f"{path}: cannot recover the Llama-3 rope scaling from rope_freqs.weight (fewer than two "
                         f"frequencies in the smoothed band)")
    smooth = (1 / freq_factors[between] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(inv_freq[between] / (2 * math.pi), smooth, 1)
    span = original_context / slope  # high_freq_factor - low_freq_factor
    low = -intercept * span
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": float(low),
            "high_freq_factor": float(low + span), "original_max_position_embeddings": original_context}


def _type_name(qtype: int) -> str:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(qtype).name


def _value(field) -> Any:
    from gguf import GGUFValueType

    value = field.contents()
    if field.types == [GGUFValueType.FLOAT32]:
        # the shortest decimal that is this float32: 1e-06 rather than 9.999999974752427e-07, as in config.json
        return float(str(np.float32(value)))
    return value
