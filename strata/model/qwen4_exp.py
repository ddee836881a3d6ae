"""Qwen4ExpForCausalLM (HF `qwen4_exp`, llama.cpp `qwen4exp`): the Qwen3.5 hybrid stack (Gated DeltaNet with
Qwen3.5's split projections and a sigmoid or silu output gate, gated attention, 512-expert MoE with a gated
shared expert) rebuilt around hyper-connections (strata.model.hyper: no layer norms, `hc_count` residual
streams, a final stream mixer instead of a final norm), QSA indexed attention on its attention layers
(strata.model.qsa) and PLE n-gram embeddings on some Gated DeltaNet layers (strata.model.ple).

Per-slot state: the Gated DeltaNet pools (per linear layer) and PLE's (under ("ple", layer)) in the runner's
recurrent-state pool; QSA's raw index keys in the KV pool (under ("index", layer)).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from strata.config import ModelConfig
from strata.model.attention import BATCHED_MAX_QUERY_LEN, Attention
from strata.model.context import ForwardContext
from strata.model.decoder import CausalLM, WeightLoadError, build_part, text_model_name
from strata.model.gated_delta_net import GatedDeltaNet
from strata.model.hyper import GroupRMSNorm, HyperConnection, inject
from strata.model.linear import Linear
from strata.model.moe import MoEBlock
from strata.model.norm import RMSNorm
from strata.model.ple import PerLayerEmbedding
from strata.model.qsa import SPARSE_VARIANT, QSAAttention, index_cache_key, reads_sparse_context

# HF checkpoints store each n-gram table in row shards; the hash buffers are derived from the config
_TABLE_SHARD = re.compile(r"(.*\.ngram_embedding)\.shard_(\d+)\.weight$")
_DRAFT_INDEXER = re.compile(r"mtp\.layers\.\d+\.self_attn\.indexer\.")  # the draft block attends densely
_INDEXER = re.compile(r"\.self_attn\.indexer\.")
_DERIVED_BUFFER = re.compile(r"\.ple_embedding\.(layer_multipliers|ngram_heads_vocab_sizes|ngram_heads_offsets)$")


class Qwen4ExpLayer(nn.Module):
    """One block between hyper-connections. `draft`: the MTP head's block (index num_hidden_layers), whose
    attention is dense, as llama.cpp's qwen4exp draft graph runs it (its indexer tensors are not loaded)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, draft: bool = False) -> None:
        super().__init__()
        if draft:
            self.mixer_name = "self_attn"
            mixer = Attention(cfg, layer_idx, gated=True, zero_centered_norm=True)
        elif cfg.is_linear_attention_layer(layer_idx):
            self.mixer_name = "linear_attn"
            mixer = GatedDeltaNet(cfg, layer_idx, grouped_qkvz=False, gate_activation=cfg.linear_gate_activation)
        else:
            self.mixer_name = "self_attn"
            mixer = (QSAAttention(cfg, layer_idx) if cfg.qsa
                     else Attention(cfg, layer_idx, gated=True, zero_centered_norm=True))
        self.add_module(self.mixer_name, mixer)
        self.mlp = MoEBlock(cfg)
        self.ple = (PerLayerEmbedding(cfg, layer_idx, cfg.ple_layers.index(layer_idx))
                    if layer_idx in cfg.ple_layers and not draft else None)
        self.attn_hyper_connection = HyperConnection(cfg)
        self.mlp_hyper_connection = HyperConnection(cfg)

    def forward(self, streams: torch.Tensor, ctx: ForwardContext, input_ids: torch.Tensor | None) -> torch.Tensor:
        """streams [T, hc * D] -> streams after this layer's mixer and MLP."""
        if self.ple is not None:
            streams = streams + self.ple(streams, input_ids, ctx)
        x, weights = self.attn_hyper_connection(streams)
        streams = inject(streams, getattr(self, self.mixer_name)(x, ctx), weights)
        x, weights = self.mlp_hyper_connection(streams)
        # the top-k sum in the write's launch
        return inject(streams, self.mlp.forward_unsummed(x, ctx.max_query_len), weights)


class Qwen4ExpBody(nn.Module):
    """`model.*`: embedding, layers and the final stream mixer (each a pipeline stage's part or its shapes)."""

    def __init__(self, cfg: ModelConfig, build_layer) -> None:
        super().__init__()
        self.embed_tokens = build_part("model.embed_tokens.", cfg,
                                       lambda: nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(build_part(f"model.layers.{i}.", cfg, lambda i=i: build_layer(i))
                                    for i in range(cfg.num_hidden_layers))
        self.hyper_connection_mixer = build_part("model.hyper_connection_mixer.", cfg,
                                                 lambda: HyperConnection(cfg, inject=False))


class Qwen4ExpMTP(nn.Module):
    """The MTP draft head (`mtp.*`): the next token's normed embedding and the target's normed streams,
    each projected (fc_embedding, fc_hidden: llama.cpp's eh_proj halves) and summed per stream, run
    through one trunk-shaped block; its own mixer (`draft_logits`) collapses the streams for the shared
    LM head. Input and output are wide streams [T, hc * D], so drafts chain on its own output."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.num_mtp_layers != 1:
            raise ValueError(f"the checkpoint has {cfg.num_mtp_layers} MTP layers; Strata supports exactly 1")
        self.hc, dim = cfg.hc_count, cfg.hidden_size
        self.pre_fc_norm_embedding = RMSNorm(dim, cfg.rms_norm_eps, zero_centered=True)
        self.pre_fc_norm_hidden = GroupRMSNorm(self.hc * dim, dim, cfg.rms_norm_eps)
        self.fc_embedding = Linear(dim, dim, bias=False)
        self.fc_hidden = Linear(dim, dim, bias=False)
        self.layers = nn.ModuleList([Qwen4ExpLayer(cfg, cfg.num_hidden_layers, draft=True)])
        self.hyper_connection_mixer = HyperConnection(cfg, inject=False)

    def forward(self, embeds: torch.Tensor, streams: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """embeds [T, D] (of each position's next token), streams [T, hc * D] -> draft streams [T, hc * D]."""
        token = self.fc_embedding(self.pre_fc_norm_embedding(embeds))                        # [T, D]
        hidden = self.fc_hidden(self.pre_fc_norm_hidden(streams).unflatten(-1, (self.hc, -1)))  # [T, hc, D]
        return self.layers[0]((hidden + token.unsqueeze(-2)).flatten(-2), ctx, None)


class Qwen4ExpForCausalLM(CausalLM):
    zero_centered_norm = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.mtp = build_part("mtp.", cfg, lambda: Qwen4ExpMTP(cfg)) if cfg.num_mtp_layers > 0 else None

    @property
    def has_mtp(self) -> bool:
        return self.mtp is not None

    def graph_variant(self, scheduled) -> str | None:
        """A step where some row reads a sparse QSA context replays the sparse variant, whose rows choose their
        blocks on the device (model/qsa.py), when all its windows take the paged attention kernel (at most 16
        tokens); else it runs eagerly. Other steps replay the plain graph."""
        if not any(reads_sparse_context(self.config, w.num_computed_tokens + w.num_new_tokens) for w in scheduled):
            return ""
        if any(w.num_new_tokens > BATCHED_MAX_QUERY_LEN for w in scheduled):
            return None
        return SPARSE_VARIANT

    def warm_graph_variants(self) -> tuple[str, ...]:
        return (SPARSE_VARIANT,) if self.config.qsa else ()

    def build_body(self, cfg: ModelConfig) -> nn.Module:
        return Qwen4ExpBody(cfg, self.build_layer)

    def build_layer(self, layer_idx: int) -> Qwen4ExpLayer:
        return Qwen4ExpLayer(self.config, layer_idx)

    def forward(self, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """input_ids [T] -> the last layer's streams [T, hc * D] (what the MTP head reads; `compute_logits`
        mixes them for the LM head). A pipeline stage runs its own layers between the streams the previous
        stage passes on and those it passes to the next (runner/pipeline.py); only the last one's are the
        model's output (every stage has the step's token ids: PLE layers read them where they run)."""
        stage, layers = self.stage, self.model.layers
        if stage is None or stage.is_first:
            streams = self.model.embed_tokens(input_ids).repeat(1, self.config.hc_count)   # [T, hc * D]
        else:
            dim = self.config.hc_count * self.config.hidden_size
            dtype = self.model.hyper_connection_mixer.hc_norm.weight.dtype  # (shapes only on this stage)
            streams, = stage.take_over(1, input_ids.shape[0], dim, dtype, input_ids.device)
        if stage is not None:
            layers = layers[stage.first_layer:stage.end_layer]
        for layer in layers:
            streams = layer(streams, ctx, input_ids)
        if stage is not None and not stage.is_last:
            stage.pass_on(streams)
        return streams

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """streams [N, hc * D] -> float32 logits [N, V], through the trunk's output mixer, whose rows round
        alike however many are read (a verification layout's head graph reads all its rows, an eager step
        the ones it samples)."""
        return super().compute_logits(self.model.hyper_connection_mixer(hidden, rows_alike=True)[0])

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """MTP streams [N, hc * D] -> float32 logits [N, V], through the head's own mixer."""
        return super().compute_logits(self.mtp.hyper_connection_mixer(hidden)[0])

    def mtp_forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """input_ids [T] (the token after each position), hidden [T, hc * D] -> draft streams [T, hc * D]."""
        return self.mtp(self.model.embed_tokens(input_ids), hidden, ctx)

    def recurrent_state_shapes(self) -> dict:
        """Linear-attention layer -> its Gated DeltaNet (conv, delta-rule) state shapes; ("ple", layer) ->
        its PLE (conv history, n-gram context) shapes."""
        shapes = {}
        for i, layer in enumerate(self.model.layers):
            if layer.mixer_name == "linear_attn":
                shapes[i] = layer.linear_attn.state_shapes()
            if layer.ple is not None:
                shapes[layer.ple.key] = layer.ple.state_shapes()
        return shapes

    def index_key_layers(self) -> dict:
        """KV-pool key -> the per-token width of what QSA caches beside K and V there."""
        cfg = self.config
        return {index_cache_key(i): cfg.indexer_head_dim for i in cfg.full_attention_layers} if cfg.qsa else {}

    def is_ignored_weight(self, name: str) -> bool:
        if _DERIVED_BUFFER.search(name) or _DRAFT_INDEXER.match(name):
            return True
        if not self.config.qsa and _INDEXER.search(name):  # dense attention (a GGUF of ratio 0): unread
            return True
        if self.has_mtp and name.startswith("mtp."):  # `mtp.*` load into self.mtp under their own names
            return self._other_stages_layer(name) or super().is_ignored_weight(name.removeprefix("mtp."))
        return super().is_ignored_weight(name)

    def checkpoint_targets(self, name: str, tensor: torch.Tensor) -> list[tuple[str, tuple, torch.Tensor]]:
        if m := _TABLE_SHARD.match(text_model_name(name)):
            # torch.chunk's split of the rows into ngram_table_shards: all shards but the last are full
            table = self.get_submodule(m.group(1))
            rows = table.weight.shape[0]
            per_shard = -(-rows // self.config.ngram_table_shards)
            start = int(m.group(2)) * per_shard
            if start + tensor.shape[0] > rows:
                raise WeightLoadError(f"{name}: n-gram table shard of {tensor.shape[0]} rows does not fit the "
                                      f"{rows}-row table at row {start}")
            return [(m.group(1) + ".weight", (slice(start, start + tensor.shape[0]),), tensor)]
        return super().checkpoint_targets(name, tensor)
