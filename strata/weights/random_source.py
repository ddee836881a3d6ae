"""Random weights of a named real shape, created directly on the target device and seeded:
`random:qwen3-30b-a3b`, `random:qwen3-next-80b-a3b?num_hidden_layers=12`. Initialised so that logits
are peaked (the final hidden state has unit RMS; the LM head scales it to logits of std ~4), which
keeps greedy decoding away from near-ties and benchmarks realistic.

`?routing_skew=S` (MoE shapes, benchmarks of expert placement) adds a Zipf prior with exponent S to every
router: expert of popularity rank r gets logit bias -S * ln(r), ranks shuffled per layer, so some experts
are used far more often than others (random routers alone are near-uniform)."""

from __future__ import annotations

import math
from urllib.parse import parse_qsl

import torch
from torch import nn

from strata.config import ModelConfig
from strata.model.registry import GatedRMSNorm, MoEBlock, RMSNorm

_QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "rope_theta": 1e6, "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6, "eos_token_id": 151645, "bos_token_id": 151643,
}
_QWEN3_NEXT_80B_A3B = {
    "architectures": ["Qwen3NextForCausalLM"], "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 5120, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
    "norm_topk_prob": True, "full_attention_interval": 4, "partial_rotary_factor": 0.25, "rope_theta": 1e7,
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "mtp_num_hidden_layers": 1,
    "eos_token_id": 151645, "bos_token_id": 151643,
}
_QWEN3_6_35B_A3B = {  # Qwen3.5 / Qwen3.6-35B-A3B
    "architectures": ["Qwen3_5MoeForCausalLM"], "vocab_size": 248320, "hidden_size": 2048,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_hidden_layers": 40,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4, "num_experts": 256, "num_experts_per_tok": 8, "full_attention_interval": 4,
    "partial_rotary_factor": 0.25, "rope_theta": 1e7, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
    "mtp_num_hidden_layers": 1, "eos_token_id": 248046, "bos_token_id": None,
}
_QWEN4EXP_125B = {  # the seed's model, Qwen4-Exp ("Qwen3.8-Flash-Next")
    "architectures": ["Qwen4ExpForCausalLM"], "vocab_size": 248320, "hidden_size": 2560,
    "moe_intermediate_size": 640, "shared_expert_intermediate_size": 640, "num_hidden_layers": 48,
    "num_attention_heads": 24, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10, "full_attention_interval": 4,
    "partial_rotary_factor": 0.25, "rope_theta": 1e7, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
    "output_gate_type": "sigmoid", "hc_count": 4, "hc_lowrank": 320,
    "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": 128, "indexer_budget": 2048,
    "indexer_compress_ratio": 4,
    # PLE on layer 1 (1-based): 16 hashed heads of 160 over ~320M rows; `ple_layer_ids=none` leaves it out,
    # `ngram_vocab_size_base=N` shrinks the table (its rows are read a few per token whatever its size)
    "ple_layer_ids": [1], "ngram_size": 3, "heads_per_ngram": 8, "ngram_vocab_size_base": 20_000_000,
    "mtp_num_hidden_layers": 1, "eos_token_id": 248046, "bos_token_id": None,
}
_SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "rope_theta": 100000.0,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "eos_token_id": 2,
}
SHAPES = {"qwen3-30b-a3b": _QWEN3_30B_A3B, "qwen3-next-80b-a3b": _QWEN3_NEXT_80B_A3B,
          "qwen3.6-35b-a3b": _QWEN3_6_35B_A3B, "qwen4exp-125b": _QWEN4EXP_125B, "smollm2-135m": _SMOLLM2_135M}


def _parse_override(value: str):
    if value.lower() == "none":
        return None
    if "," in value or value.startswith("["):  # a list of ints: ple_layer_ids=1,5
        return [int(v) for v in value.strip("[]").split(",") if v]
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


# Tensors of more values than HUGE_ELEMENTS are drawn in row pieces of at most PIECE_ELEMENTS (RandomSource.initialize);
# every tensor of the shapes' defaults but Qwen4-Exp's PLE table is below it (its largest, Qwen3.6's and Qwen4-Exp's
# 248,320-token embeddings, has 0.64 G values)
HUGE_ELEMENTS = 1 << 32
PIECE_ELEMENTS = 1 << 30


class RandomSource:
    experts_packed = False

    def __init__(self, spec: str) -> None:
        name, _, query = spec.removeprefix("random:").partition("?")
        if name not in SHAPES:
            raise ValueError(f"unknown random shape {name!r}; known: {', '.join(SHAPES)}")
        self.hf_config = dict(SHAPES[name])
        self.routing_skew = 0.0
        for key, value in parse_qsl(query, strict_parsing=bool(query)):
            if key == "routing_skew":
                self.routing_skew = float(value)
                if self.routing_skew < 0 or not self.hf_config.get("num_experts"):
                    raise ValueError(f"routing_skew needs an MoE shape and a value >= 0, got {value!r} for {name!r}")
                continue
            if key not in self.hf_config and key not in ("num_experts_per_tok", "max_position_embeddings"):
                raise ValueError(f"random shape {name!r} has no field {key!r}")
            self.hf_config[key] = _parse_override(value)
        self.description = spec

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_hf(self.hf_config)

    def num_tensors(self) -> int:
        return 0

    def weight_sizes(self, dtype: torch.dtype, owned: range | None = None) -> None:
        return None  # the model's parameters in dtype

    def tensors(self, dtype: torch.dtype):
        return iter(())

    @torch.no_grad()
    def initialize(self, model: nn.Module, seed: int) -> None:
        device = next(model.parameters()).device
        gen = torch.Generator(device=device).manual_seed(seed)

        def draw(param: torch.Tensor, fill) -> None:
            # a tensor above HUGE_ELEMENTS (Qwen4-Exp's PLE table: 51 G values, 95 GiB in bf16, kept in host
            # memory) is drawn in row pieces of at most PIECE_ELEMENTS wherever it lives, so staging it needs no
            # device as large as the tensor and its values do not depend on where it lives either
            if param.numel() > HUGE_ELEMENTS and param.dim() > 1:
                rows = max(1, PIECE_ELEMENTS // (param.numel() // param.shape[0]))
                for start in range(0, param.shape[0], rows):
                    draw_whole(param[start:start + rows], fill)
            else:
                draw_whole(param, fill)

        def draw_whole(param: torch.Tensor, fill) -> None:
            # experts may sit in host memory (a partial expert cache): they are drawn on the main device
            # one tensor at a time and copied over, so the weights do not depend on where they live; another
            # pipeline stage's layers (meta) are drawn and dropped, so this stage's draws stay the whole model's
            if param.is_meta:
                fill(torch.empty(param.shape, dtype=param.dtype, device=device))
            elif param.device == device:
                fill(param)
            else:
                staged = torch.empty_like(param, device=device)
                fill(staged)
                param.copy_(staged)

        norm_params = {id(m.weight): m for m in model.modules() if isinstance(m, (RMSNorm, GatedRMSNorm))}
        hidden = model.config.hidden_size
        for name, param in model.named_parameters():
            if id(param) in norm_params:
                param.fill_(0.0 if getattr(norm_params[id(param)], "zero_centered", False) else 1.0)
            elif name.endswith("A_log"):
                draw(param, lambda t: t.uniform_(0.0, math.log(16.0), generator=gen))
            elif name.endswith(("dt_bias", ".bias")):
                param.zero_()
            elif name.endswith("lm_head.weight") or (name.endswith("embed_tokens.weight")
                                                     and model.config.tie_word_embeddings):
                draw(param, lambda t: t.normal_(0.0, 4.0 / math.sqrt(hidden), generator=gen))
            elif name.endswith("embed_tokens.weight"):
                draw(param, lambda t: t.normal_(0.0, 1.0, generator=gen))
            else:
                draw(param, lambda t: t.normal_(0.0, 1.0 / math.sqrt(t.shape[-1]), generator=gen))
        if self.routing_skew:
            _add_routing_skew(model, self.routing_skew, gen)


def _add_routing_skew(model: nn.Module, exponent: float, gen: torch.Generator) -> None:
    for block in (m for m in model.modules() if isinstance(m, MoEBlock)):
        num_experts = block.gate.weight.shape[0]
        ranks = torch.randperm(num_experts, generator=gen, device=gen.device) + 1        # [E], 1 = most used
        bias = -exponent * torch.log(ranks.float())                                       # [E]
        block.routing_bias = bias if block.gate.weight.is_meta else bias.to(block.gate.weight.device)
