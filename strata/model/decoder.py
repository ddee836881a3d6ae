"""The decoder-only causal LM every family shares: embedding, a stack of (norm, mixer, norm, MLP)
layers with residuals, final norm, LM head; and the one checkpoint loader.

Family files only choose each layer's mixer (attention or Gated DeltaNet) and MLP (dense or MoE).
Parameter names follow HF checkpoint names, except fused projections (qkv_proj, gate_up_proj,
experts.w13/w2), which `load_weights` fills shard by shard. A checkpoint tensor given as a PackedWeight
(GGUF blocks) replaces its linear or embedding module's dense weight once every part of it has come; a
layer's experts given as two PackedExpertWeights (w13, w2) replace its LocalExperts.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterable

import torch
from torch import nn

from strata.config import ModelConfig
from strata.model import ops
from strata.model.context import ForwardContext
from strata.model.gated_delta_net import GatedDeltaNet
from strata.model.linear import Linear
from strata.model.moe import LocalExperts, MoEBlock, PackedLocalExperts, TopkPartials, experts_on_meta
from strata.model.norm import RMSNorm
from strata.model.packed import PackedEmbedding, PackedExpertWeight, PackedWeight

# checkpoint projection -> (fused parameter, shard index along dim 0)
_STACKED = {
    "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    # Qwen3.5 / Qwen4-Exp Gated DeltaNet: four checkpoint tensors, two fused projections
    "in_proj_qkv": ("in_proj_qkvz", 0), "in_proj_z": ("in_proj_qkvz", 1),
    "in_proj_b": ("in_proj_ba", 0), "in_proj_a": ("in_proj_ba", 1),
}
_PER_EXPERT = re.compile(r"(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
_FUSED_EXPERTS = re.compile(r"(.*\.experts)\.(gate_up_proj|down_proj)$")
_IGNORED = re.compile(r"(rotary_emb\.inv_freq|\.mtp\.|^mtp\.|^model\.visual\.)")
_LAYER_INDEX = re.compile(r"model\.layers\.(\d+)\.")
_TEXT_MODEL_PREFIX = "model.language_model."  # multimodal checkpoints (strata.config.TEXT_MODEL_OF)


class WeightLoadError(ValueError):
    pass


class DecoderLayer(nn.Module):
    def __init__(self, mixer_name: str, mixer: nn.Module, mlp: nn.Module, hidden_size: int, eps: float,
                 zero_centered_norm: bool = False) -> None:
        super().__init__()
        self.mixer_name = mixer_name
        self.add_module(mixer_name, mixer)
        self.mlp = mlp
        self.input_layernorm = RMSNorm(hidden_size, eps, zero_centered_norm)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps, zero_centered_norm)

    def forward(self, hidden: torch.Tensor, ctx: ForwardContext,
                residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual stream kept apart (vLLM style) so each add fuses into the next norm:
        (previous block's output, residual so far) -> (this layer's MLP output, residual before it).
        The layer's full output is their sum; with residual None, `hidden` is the layer input itself."""
        if residual is None:
            residual, x = hidden, self.input_layernorm(hidden)
        else:
            x, residual = self.input_layernorm(hidden, residual)
        x = getattr(self, self.mixer_name)(x, ctx)
        x, residual = self.post_attention_layernorm(x, residual)
        # an MoE layer may leave its top-k sum to the next norm (TopkPartials): every consumer of a
        # layer's output is a norm with the residual (the next layer's, the final one, the MTP head's)
        if isinstance(self.mlp, MoEBlock):
            return self.mlp.forward_unsummed(x, ctx.max_query_len), residual
        return self.mlp(x), residual


# a pipeline stage's process builds only its own layers' weights (owning_layers); the others are shapes on the
# meta device, which nothing loads or runs there
_OWNED_LAYERS: contextvars.ContextVar[range | None] = contextvars.ContextVar("owned_layers", default=None)


_LAST_STAGE_PARTS = ("model.norm.", "model.hyper_connection_mixer.", "lm_head.", "mtp.")


def outside_stage(name: str, owned: range | None, cfg: ModelConfig) -> bool:
    """Whether checkpoint or parameter `name` belongs to another pipeline stage than the one of layers `owned`
    (None: no split, every part is this process's). The parts outside decoder layers go where they run: the
    embeddings to the first stage, and to the last too where it needs them (the MTP head embeds its drafts'
    tokens; a tied LM head is the embedding); the final norm (Qwen4-Exp: stream mixer), LM head and MTP head to
    the last stage."""
    if owned is None:
        return False
    name = text_model_name(name)
    if m := _LAYER_INDEX.match(name):
        return int(m.group(1)) not in owned
    first, last = owned.start == 0, owned.stop >= cfg.num_hidden_layers
    if name.startswith("model.embed_tokens."):
        return not (first or (last and (cfg.num_mtp_layers > 0 or cfg.tie_word_embeddings)))
    if name.startswith(_LAST_STAGE_PARTS):
        return not last
    return False


def build_part(name: str, cfg: ModelConfig, build: Callable[[], nn.Module]) -> nn.Module:
    """build() for the module at `name` ("lm_head."), or its shapes on the meta device where it belongs to
    another pipeline stage (outside_stage)."""
    if not outside_stage(name, _OWNED_LAYERS.get(), cfg):
        return build()
    with torch.device("meta"), experts_on_meta():
        return build()


@contextlib.contextmanager
def owning_layers(layers: range | None):
    """Models built inside get real weights for `layers` only (None: every layer)."""
    token = _OWNED_LAYERS.set(layers)
    try:
        yield
    finally:
        _OWNED_LAYERS.reset(token)


class DecoderBody(nn.Module):
    def __init__(self, cfg: ModelConfig, build_layer: Callable[[int], DecoderLayer],
                 zero_centered_norm: bool) -> None:
        super().__init__()
        self.embed_tokens = build_part("model.embed_tokens.", cfg,
                                       lambda: nn.Embedding(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(build_part(f"model.layers.{i}.", cfg, lambda i=i: build_layer(i))
                                    for i in range(cfg.num_hidden_layers))
        self.norm = build_part("model.norm.", cfg,
                               lambda: RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, zero_centered_norm))


class CausalLM(nn.Module):
    """Base class of every model family. Subclasses implement `build_layer`."""

    zero_centered_norm = False
    has_mtp = False
    cuda_graph_safe = True  # every layer's CUDA path can be captured (see runner.model_runner.graph_safe)
    stage = None  # a pipeline split's part this process runs (runner/pipeline.py; None: every layer)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        # a pipeline stage's layers (owning_layers when built; None: every layer): what its loads fill
        self.owned_layers = _OWNED_LAYERS.get()
        self._stack = False  # _cpu_stack's, once built (None: the layers do not fit it)
        self.model = self.build_body(cfg)
        self.lm_head = build_part("lm_head.", cfg, lambda: nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False))
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def build_body(self, cfg: ModelConfig) -> nn.Module:
        """`model.*`: embedding, layers, final norm (a family with another residual scheme replaces it)."""
        return DecoderBody(cfg, self.build_layer, self.zero_centered_norm)

    def build_layer(self, layer_idx: int) -> DecoderLayer:
        raise NotImplementedError

    def graph_variant(self, scheduled) -> str | None:
        """Beyond its layout fitting one, which CUDA graph may run this step (ScheduledSlots): "" the plain
        one, another name a variant the forward takes when captured with it (ctx.graph_variant), None none
        (it runs eagerly)."""
        return ""

    def warm_graph_variants(self) -> tuple[str, ...]:
        """Variants (graph_variant) whose one-slot decode layout the warm-up ladder captures too, so the first
        step that needs one does not wait for its capture and its kernels' first compile."""
        return ()

    def index_key_layers(self) -> dict:
        """Extra per-token caches beside K and V (KV-pool key -> width); none but for QSA layers."""
        return {}

    def forward(self, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """input_ids [T] -> final-normed hidden states [T, D]. A pipeline stage runs its own layers between the
        previous stage's activations and the next one's; only the last one's output is the model's (the other
        stages return their own last hidden, which nothing reads)."""
        stage = self.stage
        if stage is None:
            hidden, residual = self.model.embed_tokens(input_ids), None
            stack = self._cpu_stack() if ops.native_cpu_rows(hidden) else None
            if stack is not None and stack.takes(ctx):
                hidden, residual = stack.run(hidden, ctx)
            else:
                for layer in self.model.layers:
                    hidden, residual = layer(hidden, ctx, residual)
            return self.model.norm(hidden, residual)[0]
        if stage.is_first:
            hidden, residual = self.model.embed_tokens(input_ids), None
        else:
            hidden, residual = stage.take_over(2, input_ids.shape[0], self.config.hidden_size,
                                               self.model.norm.weight.dtype, input_ids.device)
        for layer in self.model.layers[stage.first_layer:stage.end_layer]:
            hidden, residual = layer(hidden, ctx, residual)
        if not stage.is_last:
            hidden = hidden.total() if isinstance(hidden, TopkPartials) else hidden
            stage.pass_on(hidden, residual)
            return hidden
        return self.model.norm(hidden, residual)[0]

    def _cpu_stack(self):
        """The native stack of this model's layers for CPU decode steps (model/cpu_stack.py), built at the first
        CPU forward, after the weights are in; None where the model's layers do not fit it."""
        if self._stack is False:
            from strata.model.cpu_stack import DenseStack

            self._stack = DenseStack.of(self)
        return self._stack

    def forget_cpu_stack(self) -> None:
        """Build the CPU stack again at the next forward: it holds the weights' addresses and modes."""
        self._stack = False

    def _apply(self, fn, recurse: bool = True):
        self.forget_cpu_stack()  # the weights may move
        return super()._apply(fn, recurse)

    def recurrent_state_shapes(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Layer -> per-slot (conv, delta-rule) state shapes; empty for models without recurrent layers."""
        return {}

    def logits_read_in_place(self, rows: int) -> bool:
        """Whether compute_logits of `rows` rows reads the LM head where it is (a packed head past its GEMV
        kernels' rows is dequantized to a temporary as large as itself): what an LM head graph may capture."""
        weight = self.lm_head.weight
        return not isinstance(weight, PackedWeight) or ops.packed_linear_in_place(weight, rows)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, D] -> float32 logits [N, V] (ops.logits: in 16-bit on CUDA the GEMM writes float32)."""
        if isinstance(self.lm_head.weight, PackedWeight):
            return ops.packed_linear(hidden, self.lm_head.weight, self.lm_head.bias, out_dtype=torch.float32)
        return ops.logits(hidden, self.lm_head.weight, self.lm_head.bias)

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The MTP head's hidden states [N, .] -> float32 logits [N, V] (the shared LM head by default)."""
        return self.compute_logits(hidden)

    # ---- checkpoint loading -------------------------------------------------------------------

    def is_ignored_weight(self, name: str) -> bool:
        return (bool(_IGNORED.search(name)) or (self.config.tie_word_embeddings and name == "lm_head.weight")
                or self._other_stages_layer(name))

    def _other_stages_layer(self, name: str) -> bool:
        """A tensor of a part another pipeline stage holds (see owning_layers): a stage's load skips it."""
        return outside_stage(name, self.owned_layers, self.config)

    def checkpoint_targets(self, name: str, tensor: torch.Tensor) -> list[tuple[str, tuple, torch.Tensor]]:
        """Map one checkpoint tensor to (parameter name, index into that parameter, values)."""
        name = text_model_name(name)
        if m := _PER_EXPERT.match(name):
            prefix, expert, proj = m.group(1), int(m.group(2)), m.group(3)
            if proj == "down_proj":
                return [(f"{prefix}.w2", (expert,), tensor)]
            rows = tensor.shape[0]
            shard = slice(0, rows) if proj == "gate_proj" else slice(rows, 2 * rows)
            return [(f"{prefix}.w13", (expert, shard), tensor)]
        if m := _FUSED_EXPERTS.match(name):
            target = f"{m.group(1)}.{'w13' if m.group(2) == 'gate_up_proj' else 'w2'}"
            return [(target, (), tensor)]
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in _STACKED:
            fused, shard = _STACKED[parts[-2]]
            param_name = ".".join(parts[:-2] + [fused, parts[-1]])
            module = self.get_submodule(".".join(parts[:-2] + [fused]))
            start, size = _shard_range(module, fused, shard)
            return [(param_name, (slice(start, start + size),), tensor)]
        return [(name, (), tensor)]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor | PackedWeight]],
                     source: str = "checkpoint") -> None:
        params = dict(self.named_parameters())
        filled = {name: 0 for name in params}
        packed: dict[str, list[tuple[tuple, PackedWeight | PackedExpertWeight]]] = {}  # parameter -> (index, part)
        for name, tensor in weights:
            if self.is_ignored_weight(name):
                continue
            for param_name, index, values in self.checkpoint_targets(name, tensor):
                param = params.get(param_name)
                if param is None:
                    raise WeightLoadError(f"{source}: tensor {name!r} has no place in {type(self).__name__}")
                dest = param.data[index] if index else param.data
                is_packed = isinstance(values, (PackedWeight, PackedExpertWeight))
                if (not is_packed and dest.shape != values.shape and dest.shape == values.shape[::-1]
                        and values.dim() == 3):
                    values = values.transpose(1, 2)  # fused experts stored as [E, D, 2I]
                if dest.shape != values.shape:
                    raise WeightLoadError(f"{source}: tensor {name!r} has shape {tuple(values.shape)}, "
                                          f"expected {tuple(dest.shape)} for {param_name}")
                if is_packed:
                    packed.setdefault(param_name, []).append((index, values))
                else:
                    dest.copy_(values)
                filled[param_name] += dest.numel()
        missing = [n for n, count in filled.items() if count < params[n].numel() and not self._other_stages_layer(n)]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise WeightLoadError(f"{source}: missing weights for {shown}")
        experts = {name.rpartition(".")[0] for name in packed if isinstance(packed[name][0][1], PackedExpertWeight)}
        for param_name, parts in packed.items():
            if param_name.rpartition(".")[0] not in experts:
                self._place_packed(param_name, params[param_name], parts)
        for module_name in experts:
            self._place_packed_experts(module_name, packed.get(f"{module_name}.w13"), packed.get(f"{module_name}.w2"))
        self._mark_norms_feeding_packed()

    def _mark_norms_feeding_packed(self) -> None:
        """Each decoder layer's norms whose output packed weights read (the mixer's projections, the MLP or
        the experts), and each Gated DeltaNet's output norm before a packed out_proj, round it for them in their
        own launch (RMSNorm.feeds_packed, GatedRMSNorm.feeds_packed)."""
        for module in self.modules():
            if isinstance(module, DecoderLayer):
                module.input_layernorm.feeds_packed = _has_packed(getattr(module, module.mixer_name))
                module.post_attention_layernorm.feeds_packed = _has_packed(module.mlp)
            elif isinstance(module, GatedDeltaNet):
                module.norm.feeds_packed = _has_packed(module.out_proj)

    def _place_packed_experts(self, module_name: str, w13: list | None, w2: list | None) -> None:
        """A layer's experts whose w13 and w2 both came packed become PackedLocalExperts on the device the
        LocalExperts were meant for; a half that came dense has the other dequantized beside it."""
        experts = self.get_submodule(module_name)
        assert isinstance(experts, LocalExperts)
        if w13 is not None and w2 is not None:
            replacement = PackedLocalExperts(w13[0][1], w2[0][1]).to(experts.home)
            parent_name, _, child = module_name.rpartition(".")
            setattr(self.get_submodule(parent_name), child, replacement)
            return
        for param, parts in ((experts.w13, w13), (experts.w2, w2)):
            if parts is None:
                continue
            if param.is_meta:
                raise WeightLoadError(f"{module_name}: some expert weights came packed and some dense; the weight "
                                      f"source said its experts were all packed")
            param.data.copy_(parts[0][1].dequantize(param.dtype))

    def _place_packed(self, param_name: str, param: nn.Parameter, parts: list[tuple[tuple, PackedWeight]]) -> None:
        """Install a parameter's packed parts as its module's weight (row order), or, where the module cannot
        take packed weights or some rows came dense, dequantize them into the dense parameter."""
        module_name = param_name.removesuffix(".weight")
        module = self.get_submodule(module_name) if module_name != param_name else None
        rows = sum(part.shape[0] for _, part in parts)
        takes_packed = isinstance(module, (nn.Linear, nn.Embedding)) and not self._is_router(module_name)
        if takes_packed and rows == param.shape[0]:
            parts = sorted(parts, key=lambda p: p[0][0].start if p[0] else 0)
            self._install_packed(module_name, module, PackedWeight.cat_rows([part for _, part in parts]))
            return
        for index, part in parts:
            (param.data[index] if index else param.data).copy_(part.dequantize(param.dtype))

    def _is_router(self, module_name: str) -> bool:
        # the fused routing kernel reads a MoE router's weight as a tensor (ops.fused_routing_on)
        parent_name, _, child = module_name.rpartition(".")
        return child == "gate" and isinstance(self.get_submodule(parent_name), MoEBlock)

    def _install_packed(self, module_name: str, module: nn.Module, weight: PackedWeight) -> None:
        if not module.weight.is_meta:  # a shape-only placeholder (a PLE table that loads packed): stays on the map
            weight = weight.to(module.weight.device)
            if weight.device.type == "cuda":  # (the CPU keeps zero-copy views of the file's map)
                weight = weight.with_runs_joined()
        if isinstance(module, nn.Embedding):
            replacement = PackedEmbedding(weight, module.weight.dtype)
        else:
            replacement = Linear.packed(module, weight)
        if self.lm_head.weight is module.weight and module is not self.lm_head:
            self.lm_head = Linear.packed(self.lm_head, weight)  # tied: the LM head reads the same blocks
        parent_name, _, child = module_name.rpartition(".")
        setattr(self.get_submodule(parent_name) if parent_name else self, child, replacement)


def _has_packed(module: nn.Module) -> bool:
    """Whether some packed weight in `module` has a type the 8-bit-activation kernels read (packed_q8; IQ4_XS
    takes float activations, for which a norm's rounding would be wasted)."""
    q8 = ops.reads_8_bit_activations
    return any(isinstance(m, PackedWeight) and any(map(q8, m.qtypes))
               or isinstance(m, PackedLocalExperts) and (q8(m.qtype13) or q8(m.qtype2)) for m in module.modules())


def text_model_name(name: str) -> str:
    """A multimodal checkpoint's text-model tensor name as the text model's own (`model.language_model.x`
    -> `model.x`)."""
    return "model." + name.removeprefix(_TEXT_MODEL_PREFIX) if name.startswith(_TEXT_MODEL_PREFIX) else name


def _shard_range(module: nn.Module, fused: str, shard: int) -> tuple[int, int]:
    sizes = getattr(module, "shard_sizes", None)
    if sizes is None:
        raise WeightLoadError(f"{fused} declares no shard_sizes")
    return sum(sizes[:shard]), sizes[shard]
