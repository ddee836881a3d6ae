"""The roofline side of a benchmark: parameter counts and the bytes one decode step must read, from
the model config alone, plus the device's copy bandwidth and 16-bit GEMM rate measured in the same run.

Bytes per decode step = dense weights (everything but the experts and the embedding table; the LM head
is read whole, tied or not) + distinct experts touched x bytes per expert + KV read (context positions
x per-token KV bytes over the full-attention layers) + recurrent state read and written (hybrid
models). Not counted: activations, embedding rows, the MTP head's own weights (so an MTP arm's
fraction is a lower bound). The counts match the parameters strata's models hold (tests/bench).
"""

from __future__ import annotations

import statistics
import time
import dataclasses
from dataclasses import asdict, dataclass
from functools import partial

import torch

from strata.config import HYBRID_ARCHITECTURES, ModelConfig
from strata.model.registry import LocalExperts, PackedLocalExperts, PackedWeight


def _attention_params(cfg: ModelConfig) -> int:
    gated = cfg.architecture in HYBRID_ARCHITECTURES  # per-head [q | gate] projection
    q_size = cfg.num_attention_heads * cfg.head_dim
    qkv_out = q_size * (2 if gated else 1) + 2 * cfg.num_key_value_heads * cfg.head_dim
    params = cfg.hidden_size * qkv_out + q_size * cfg.hidden_size
    if cfg.attention_bias:
        params += qkv_out + cfg.hidden_size
    if cfg.qk_norm:
        params += 2 * cfg.head_dim
    return params


def _linear_attention_params(cfg: ModelConfig) -> int:
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    conv_dim = 2 * key_dim + value_dim
    return (cfg.hidden_size * (2 * key_dim + 2 * value_dim) + cfg.hidden_size * 2 * cfg.linear_num_value_heads
            + conv_dim * cfg.linear_conv_kernel_dim + 2 * cfg.linear_num_value_heads
            + cfg.linear_value_head_dim + value_dim * cfg.hidden_size)


def _mlp_dense_params(cfg: ModelConfig, moe: bool) -> int:
    """The MLP's non-expert parameters: a dense MLP, or the router plus the shared expert."""
    dim = cfg.hidden_size
    if not moe:
        return 3 * dim * cfg.intermediate_size
    shared = 3 * dim * cfg.shared_expert_intermediate_size + dim if cfg.shared_expert_intermediate_size else 0
    return dim * cfg.num_experts + shared


def _layer_dense_params(cfg: ModelConfig, linear: bool, moe: bool) -> int:
    mixer = _linear_attention_params(cfg) if linear else _attention_params(cfg)
    return mixer + _mlp_dense_params(cfg, moe) + 2 * cfg.hidden_size


@dataclass(frozen=True)
class ParamCounts:
    dense: int              # read every step: layers' non-expert weights, final norm, LM head
    embedding: int          # the embedding table when it is not the LM head (only looked-up rows read)
    per_expert: int         # one expert's gate, up and down projections
    num_moe_layers: int
    num_experts: int
    top_k: int
    mtp: int                # the MTP draft head, experts included
    lookup_tables: int = 0  # Qwen4-Exp's PLE n-gram tables (only looked-up rows read)

    @property
    def total(self) -> int:
        return (self.dense + self.embedding + self.num_moe_layers * self.num_experts * self.per_expert + self.mtp
                + self.lookup_tables)

    @property
    def active(self) -> int:
        """Parameters one token goes through (the flops of a forward are about 2 x active per token)."""
        return self.dense + self.num_moe_layers * self.top_k * self.per_expert

    def as_dict(self) -> dict:
        return {**asdict(self), "total": self.total, "active": self.active}


def count_params(cfg: ModelConfig) -> ParamCounts:
    dim, vocab = cfg.hidden_size, cfg.vocab_size
    layers = [(cfg.is_linear_attention_layer(i), cfg.is_moe_layer(i)) for i in range(cfg.num_hidden_layers)]
    dense = sum(_layer_dense_params(cfg, linear, moe) for linear, moe in layers) + dim + vocab * dim
    per_expert = 3 * dim * cfg.moe_intermediate_size if cfg.num_experts else 0
    mtp = 0
    if cfg.num_mtp_layers:
        has_moe = cfg.num_experts > 0
        mtp = (3 * dim + 2 * dim * dim + _layer_dense_params(cfg, False, has_moe)
               + (cfg.num_experts * per_expert if has_moe else 0))
    tables = 0
    if cfg.hc_count > 1:  # Qwen4-Exp
        dense, mtp, tables = _qwen4_exp_counts(cfg, dense, mtp)
    return ParamCounts(dense=dense, embedding=0 if cfg.tie_word_embeddings else vocab * dim,
                       per_expert=per_expert, num_moe_layers=sum(moe for _, moe in layers),
                       num_experts=cfg.num_experts, top_k=cfg.num_experts_per_tok, mtp=mtp, lookup_tables=tables)


def _qwen4_exp_counts(cfg: ModelConfig, dense: int, mtp: int) -> tuple[int, int, int]:
    """Qwen4-Exp's changes to the counts: hyper-connections in place of every norm around a block (two per
    layer, a mixer for the final norm and one for the MTP head's), QSA indexers, PLE projections and
    their n-gram tables (looked up by row: `lookup_tables`); the MTP head normalises all streams."""
    from strata.model.ple import head_vocab_sizes

    dim, width, rank = cfg.hidden_size, cfg.hc_count * cfg.hidden_size, cfg.hc_lowrank
    mixer = width + 2 * width * rank
    per_layer = 2 * (mixer + cfg.hc_count * width) - 2 * dim                      # two HCs, no layer norms
    indexer = dim * (cfg.indexer_n_heads + 1) * cfg.indexer_head_dim + 2 * cfg.indexer_head_dim
    dense += cfg.num_hidden_layers * per_layer + mixer - dim                         # the mixer, no final norm
    dense += len(cfg.full_attention_layers) * indexer if cfg.qsa else 0
    ple = cfg.ple_embed_dim * (width + dim) + 3 * width + width * cfg.ple_conv_kernel_size
    dense += len(cfg.ple_layers) * ple
    tables = 0
    for index in range(len(cfg.ple_layers)):
        heads = cfg.ngram_heads
        rows = sum(head_vocab_sizes(cfg.ngram_vocab_size_base, index * heads, heads))
        rows = -(-rows // cfg.ngram_vocab_size_multiple) * cfg.ngram_vocab_size_multiple
        tables += rows * (cfg.ple_embed_dim // heads)
    if mtp:  # norms: embedding (dim) and streams (width), no output norm; its block's HCs; its own mixer
        mtp += (width - dim) - dim + per_layer + mixer
    return dense, mtp, tables


@dataclass(frozen=True)
class ByteModel:
    """What one decode step of a model must read from device memory, as a function of what was
    measured in the step: distinct experts touched per MoE layer, KV positions attended, slots."""

    dense_bytes: int
    expert_bytes: int                # one expert
    num_moe_layers: int
    num_experts: int
    top_k: int
    kv_bytes_per_token: int          # K and V over all full-attention layers
    state_bytes_per_slot: int        # recurrent state over all linear-attention layers (read, once)

    @classmethod
    def from_config(cls, cfg: ModelConfig, dtype_bytes: int) -> ByteModel:
        params = count_params(cfg)
        # K and V, and QSA's index key, per token and full-attention layer
        kv = (2 * cfg.num_key_value_heads * cfg.head_dim + cfg.indexer_head_dim) * dtype_bytes \
            * len(cfg.full_attention_layers)
        conv_dim = (2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
                    + cfg.linear_num_value_heads * cfg.linear_value_head_dim)
        delta_rule = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
        # the conv state is in the model dtype, the delta-rule state in float32 (see the runner's pools)
        state = (conv_dim * (cfg.linear_conv_kernel_dim - 1) * dtype_bytes + delta_rule * 4) \
            * len(cfg.linear_attention_layers)
        return cls(params.dense * dtype_bytes, params.per_expert * dtype_bytes, params.num_moe_layers,
                   params.num_experts, params.top_k, kv, state)

    @classmethod
    def from_model(cls, model: torch.nn.Module, cfg: ModelConfig, dtype_bytes: int) -> ByteModel:
        """from_config, with the dense and per-expert bytes of the weights as loaded (every module the family
        has, hyper-connections and indexers included): GGUF blocks where they stayed packed (PackedWeight,
        PackedLocalExperts), the runtime dtype elsewhere."""
        base = cls.from_config(cfg, dtype_bytes)
        experts = [m for m in model.modules() if isinstance(m, PackedLocalExperts)]
        per_expert = base.expert_bytes
        if experts:
            per_expert = sum(e.w13.numel() + e.w2.numel() for e in experts) // sum(e.num_experts for e in experts)
        dense, seen = 0, set()
        tables = tuple(name + "." for name, m in model.named_modules() if getattr(m, "host_resident", False))
        for name, module in model.named_modules():
            if name.startswith(("mtp", *tables)) or "embed_tokens" in name \
                    or isinstance(module, (LocalExperts, PackedLocalExperts)):
                continue  # embedding and PLE tables: only looked-up rows are read
            for tensor in [*module.parameters(recurse=False), *(module.buffers(recurse=False)
                                                              if isinstance(module, PackedWeight) else ())]:
                key = id(tensor) if tensor.is_meta else tensor.data_ptr()
                if key not in seen:  # a tied LM head counts once
                    seen.add(key)
                    dense += tensor.numel() * tensor.element_size()
        return dataclasses.replace(base, dense_bytes=dense, expert_bytes=per_expert)

    def expected_experts_touched(self, tokens_per_step: float) -> float:
        """Distinct experts per MoE layer that tokens_per_step tokens touch when each picks top_k of the
        num_experts uniformly at random (a random router's expectation)."""
        if not self.num_moe_layers:
            return 0.0
        return self.num_experts * (1.0 - (1.0 - self.top_k / self.num_experts) ** tokens_per_step)

    def speculation_bound(self, slots: int, window_tokens: float, committed_per_window: float,
                          experts: tuple[float, float] | None = None) -> float:
        """The most speculation can gain over none by the bytes a step reads: tokens committed per byte of a
        verification step (slots windows of window_tokens rows, committed_per_window tokens each) over those
        of a decode step (slots rows, a token each). Weights only (dense and experts; KV and recurrent state are
        alike in both). experts: (decode, verification) distinct experts per MoE layer as measured, else a random
        router's expectation: the verification rows read more experts, which caps the gain on MoE models."""
        decode_experts, verify_experts = experts or (self.expected_experts_touched(slots),
                                                     self.expected_experts_touched(slots * window_tokens))
        decode = self.bytes_per_step(decode_experts, 0, 0)["total"]
        verify = self.bytes_per_step(verify_experts, 0, 0)["total"]
        return committed_per_window * decode / verify

    def experts_touched_upper_bound(self, tokens_per_step: float) -> float:
        """Distinct experts per MoE layer if no two tokens of a step shared one."""
        return min(float(self.num_experts), tokens_per_step * self.top_k)

    def bytes_per_step(self, experts_touched_per_layer: float, context_tokens: float, num_slots: float) -> dict:
        parts = {"dense": float(self.dense_bytes),
                 "experts": self.num_moe_layers * experts_touched_per_layer * self.expert_bytes,
                 "kv": context_tokens * self.kv_bytes_per_token,
                 "recurrent_state": 2.0 * num_slots * self.state_bytes_per_slot}  # read and written back
        return {**parts, "total": sum(parts.values())}

    def as_dict(self) -> dict:
        return asdict(self)


def decode_bandwidth(model: ByteModel, decode: dict, experts_touched: float | None, copy_bandwidth: float) -> dict:
    """Bytes per decode step and the bandwidth they imply. `decode`: StepTotals.as_dict() of the run's
    decode steps; `experts_touched`: the engine's measured mean per MoE layer per step, or None (then
    the upper bound, marked as an estimate)."""
    if not decode["num_steps"]:
        return {}
    source = "measured"
    if not model.num_moe_layers:
        experts_touched, source = 0.0, "dense_model"
    elif experts_touched is None:
        experts_touched, source = model.experts_touched_upper_bound(decode["tokens_per_step"]), "upper_bound_estimate"
    parts = model.bytes_per_step(experts_touched, decode["context_tokens_per_step"], decode["slots_per_step"])
    step_seconds = decode["wall_seconds"] / decode["num_steps"]
    bandwidth = parts["total"] / step_seconds
    return {"experts_touched_per_layer": experts_touched, "experts_touched_source": source,
            "bytes_per_decode_step": parts, "mean_decode_step_ms": step_seconds * 1e3,
            "achieved_bandwidth_bytes_s": bandwidth, "bandwidth_fraction": bandwidth / copy_bandwidth}


def _median_seconds(fn, device: str, repeats: int) -> float:
    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    fn()  # warm-up: allocator, kernels, caches
    sync()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_copy_bandwidth(device: str, num_bytes: int, repeats: int = 5) -> float:
    """Bytes read plus bytes written per second by a large device-to-device copy (median of `repeats`)."""
    src = torch.ones(num_bytes, dtype=torch.uint8, device=device)
    copy = partial(torch.empty_like(src).copy_, src)
    del src
    seconds = _median_seconds(copy, device, repeats)
    del copy
    _release(device)
    return 2 * num_bytes / seconds


def measure_matmul_flops(device: str, size: int = 8192, dtype: torch.dtype = torch.bfloat16,
                         repeats: int = 5) -> float:
    """Floating-point operations per second of one [size, size] @ [size, size] matmul (median)."""
    gen = torch.Generator(device=device).manual_seed(0)
    matmul = partial(torch.matmul, torch.randn(size, size, device=device, dtype=dtype, generator=gen),
                     torch.randn(size, size, device=device, dtype=dtype, generator=gen),
                     out=torch.empty(size, size, device=device, dtype=dtype))
    seconds = _median_seconds(matmul, device, repeats)
    del matmul
    _release(device)
    return 2 * size ** 3 / seconds


def _release(device: str) -> None:
    """Give the measurement's buffers back to the driver: the engine's pools were sized before them."""
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
