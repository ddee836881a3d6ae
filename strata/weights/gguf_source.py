"""A GGUF file (llama.cpp's format) as a weight source.

Inverts llama.cpp's convert_hf_to_gguf.py twice: GGUF metadata -> an HF config.json dict, and
llama.cpp tensor names and layouts -> HF checkpoint names and layouts (see gguf_names.py). Quantized
tensors are dequantized with gguf-py one at a time as they stream, so peak extra memory is about one
float32 tensor. Shapes are not checked here: a tensor that does not fit is the model loader's to report.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from strata.config import ModelConfig
from strata.weights.gguf_names import GGUF_ARCHITECTURES, SKIPPED_TENSORS, HFPiece, TensorInverter, hf_piece

_ARRAY_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                 "tokenizer.ggml.scores")
_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


class GGUFSource:
    def __init__(self, path: str) -> None:
        self.path = path
        self.description = path
        self.reader = _open_reader(path)
        # contents() of the token arrays would build ~150k Python strings; only their count is used
        self.metadata = {name: _value(field) for name, field in self.reader.fields.items()
                         if name not in _ARRAY_FIELDS}
        self.arch = self.metadata.get("general.architecture")
        if self.arch not in GGUF_ARCHITECTURES:
            raise ValueError(f"{path}: unsupported GGUF architecture {self.arch!r}; supported: "
                             f"{', '.join(GGUF_ARCHITECTURES)}")
        self.tensor_names = {t.name for t in self.reader.tensors}
        self.hf_config = self._hf_config()
        self.inverter = TensorInverter(self.arch, self.hf_config)
        self.plan = self._plan(self.hf_config["num_hidden_layers"])

    # ---- WeightSource ---------------------------------------------------------------------------

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_hf(self.hf_config)

    def num_tensors(self) -> int:
        return len({piece.hf_name for _, piece in self.plan})

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        pending: dict[str, list[torch.Tensor | None]] = {}
        for tensor, piece in self.plan:
            values = self.inverter.transform(tensor.name, self._dequantize(tensor))
            if piece.num_parts == 1:
                yield piece.hf_name, values.to(dtype)
                continue
            # llama.cpp split this HF tensor in parts (gate/up experts, qkv/z); hold parts until all came
            parts = pending.setdefault(piece.hf_name, [None] * piece.num_parts)
            parts[piece.part] = values
            if all(p is not None for p in parts):
                del pending[piece.hf_name]
                yield piece.hf_name, self.inverter.join(piece.hf_name, parts).to(dtype)

    # ---- tensors --------------------------------------------------------------------------------

    def _plan(self, num_layers: int) -> list[tuple[Any, HFPiece]]:
        plan, parts_seen = [], {}
        for tensor in self.reader.tensors:
            if tensor.name in SKIPPED_TENSORS:
                continue
            piece = hf_piece(self.arch, tensor.name, num_layers)
            if piece is None:
                raise ValueError(f"{self.path}: tensor {tensor.name!r} has no HF equivalent in a {self.arch} "
                                 f"model; the file may come from a newer llama.cpp than Strata knows")
            plan.append((tensor, piece))
            parts_seen.setdefault(piece.hf_name, set()).add(piece.part)
        for _, piece in plan:
            if len(parts_seen[piece.hf_name]) != piece.num_parts:
                raise ValueError(f"{self.path}: {piece.hf_name} is stored in {piece.num_parts} GGUF tensors, "
                                 f"but only {len(parts_seen[piece.hf_name])} of them are in the file")
        return plan

    def _dequantize(self, tensor) -> torch.Tensor:
        from gguf.quants import dequantize

        try:
            array = dequantize(tensor.data, tensor.tensor_type)  # float32 in HF (row-major) shape
        except NotImplementedError as e:
            raise ValueError(f"{self.path}: tensor {tensor.name!r} is {tensor.tensor_type.name}, which the "
                             f"installed gguf package cannot dequantize ({e}); upgrade gguf") from e
        if not array.flags.writeable:  # F32 tensors come back as views of the read-only file map
            array = np.array(array)
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
        if self.arch == "qwen3next":
            num_v_heads = get("ssm.time_step_rank")
            cfg.update(
                linear_conv_kernel_dim=get("ssm.conv_kernel"), linear_key_head_dim=get("ssm.state_size"),
                linear_num_key_heads=get("ssm.group_count"), linear_num_value_heads=num_v_heads,
                linear_value_head_dim=get("ssm.inner_size") // num_v_heads,
                layer_types=["linear_attention" if f"blk.{i}.ssm_a" in names else "full_attention"
                             for i in range(num_layers)])
        return cfg

    def _token_count(self) -> int:
        tokens = self.reader.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise ValueError(f"{self.path}: GGUF metadata has neither {self.arch}.vocab_size nor a token list")
        return len(tokens.data)

    def _rope_scaling(self, cfg: dict[str, Any]) -> dict[str, Any] | None:
        if "rope_freqs.weight" in self.tensor_names:
            tensor = next(t for t in self.reader.tensors if t.name == "rope_freqs.weight")
            rot_dim = round(cfg["head_dim"] * cfg["partial_rotary_factor"])
            return llama3_rope_scaling(np.asarray(tensor.data, dtype=np.float64), cfg["rope_theta"], rot_dim,
                                       self.path)
        rope_type = self._get("rope.scaling.type")
        if rope_type in (None, "none"):
            return None
        scaling = {"rope_type": rope_type, "factor": self._get("rope.scaling.factor", 1.0)}
        if (original := self._get("rope.scaling.original_context_length")) is not None:
            scaling["original_max_position_embeddings"] = original
        return scaling


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


def _value(field) -> Any:
    from gguf import GGUFValueType

    value = field.contents()
    if field.types == [GGUFValueType.FLOAT32]:
        # the shortest decimal that is this float32: 1e-06 rather than 9.999999974752427e-07, as in config.json
        return float(str(np.float32(value)))
    return value


def _open_reader(path: str):
    from gguf import GGUFReader

    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); pass a .gguf "
                         f"file written by llama.cpp, or an HF model folder")
    try:
        return GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, OSError) as e:
        raise ValueError(f"{path} is truncated or corrupt ({type(e).__name__}: {e}); download or convert it "
                         f"again") from e
