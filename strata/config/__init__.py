"""Frozen configuration dataclasses: the model's shape and every engine component's options.

Each component receives only its own sub-config. CLI options are generated from these fields
(their defaults and `help` metadata), so a field added here appears on the command line.
The model's shape lives in config/model.py (re-exported here). Nothing here imports torch or any other part of
strata.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from strata.config.model import (HYBRID_ARCHITECTURES, ROPE_TYPES, SUPPORTED_ARCHITECTURES, TEXT_MODEL_OF,
                                 ModelConfig, hf_rope_scaling, rope_attention_factor)

__all__ = ["HYBRID_ARCHITECTURES", "ROPE_TYPES", "SUPPORTED_ARCHITECTURES", "TEXT_MODEL_OF", "ModelConfig",
           "hf_rope_scaling", "rope_attention_factor", "kv_cache_torch_dtype", "kv_scale_key", "CacheConfig",
           "SchedulerConfig", "SpecConfig", "RunnerConfig", "ExpertConfig", "EngineConfig", "resolve_device",
           "resolve_dtype", "debug_flag", "KV_CACHE_DTYPES", "SPEC_METHODS", "MAX_SPEC_TOKENS", "CPU_MATMULS",
           "EXPERT_SPLITS", "CPU_EXPERT_KERNELS"]


def _opt(default: Any, help: str, **kwargs: Any) -> Any:
    return field(default=default, metadata={"help": help, **kwargs})



# "fp8": float8 e4m3 with a scale of 1 (as vLLM's uncalibrated fp8 KV), half the bytes of a 16-bit cache;
# values beyond +-448 saturate. "int8": int8 with a float32 scale per (token, KV head) vector, kept beside the
# cache under kv_scale_key(layer) (strata/kernels/kv_quant.py has the format).
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "int8")


def kv_cache_torch_dtype(kv_cache_dtype: str, model_dtype: "torch.dtype") -> "torch.dtype":
    """The dtype K and V are stored in: the model's for "auto", float8 e4m3 for "fp8" / "fp8_e4m3", int8
    for "int8"."""
    import torch

    return {"auto": model_dtype, "int8": torch.int8}.get(kv_cache_dtype, torch.float8_e4m3fn)


def kv_scale_key(layer) -> tuple:
    """Where an int8 KV layer's scales sit in the KV pool (KVPool.caches, ForwardContext.kv_caches): the
    pair (K scales, V scales), each [N_blocks, B, Hkv] float32, paged, parked and saved with the blocks."""
    return ("kv_scale", layer)


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = _opt(16, "tokens per KV block")
    num_gpu_blocks: int | None = _opt(None, "KV blocks in the pool (default: enough for every slot at max length)")
    kv_cache_mib: int | None = _opt(None, "memory for the KV pool, in MiB (vLLM's --kv-cache-memory-bytes); default: "
                                          "on CUDA what --gpu-memory-utilization leaves, on the CPU 1 GiB or one "
                                          "sequence at --max-model-len where that is more")
    kv_cache_dtype: str = _opt("auto", "KV cache dtype: auto (the model dtype), fp8 (float8 e4m3, half the "
                                       "bytes of 16-bit KV, values saturating at +-448) or int8 (half the "
                                       "bytes of 16-bit KV plus a float32 scale per token and KV head)")
    enable_prefix_caching: bool = _opt(True, "share KV blocks (and state checkpoints) of common prefixes")
    checkpoint_every: int = _opt(1024, "hybrid models: save a recurrent-state checkpoint every N prompt tokens")
    checkpoint_pool_size: int = _opt(32, "hybrid models: recurrent-state checkpoints kept on the device")
    pin_max_tokens: int | None = _opt(None, "most prompt tokens that requests may pin in the prefix cache at once "
                                            "(strata_pin_prefix; default: half the KV pool)")
    pin_ttl_s: float = _opt(3600.0, "seconds a pinned prefix stays pinned after the last request that pinned it")
    conversation_cache_mib: int | None = _opt(
        None, "host RAM for KV blocks and checkpoints evicted from the device (default: 4096 on GPU, 0 on CPU)")
    kv_resident_tokens: int = _opt(0, "KV beyond VRAM: keep only each sequence's newest N tokens of KV on the "
                                      "device (at least a block), its older blocks in host RAM (pinned on CUDA) "
                                      "where attention reads them; 0: all resident")
    kv_host_mib: int | None = _opt(None, "with --kv-resident-tokens: host RAM for the offloaded KV blocks (default: "
                                         "every slot at max_model_len; on CUDA at most 16 GiB and a quarter of "
                                         "the available RAM, at least one sequence)")
    kv_staging_layers: int = _opt(0, "with --kv-resident-tokens: copy each step's host blocks into a device ring "
                                     "of N attention layers (each one sequence at max_model_len), layer by layer "
                                     "ahead of its attention while other layers compute; 0: attention reads the "
                                     "host tier over PCIe itself")
    kv_staging_tokens: int | None = _opt(None, "with --kv-staging-layers: host-tier tokens a ring entry holds, all "
                                               "slots of a step together (default: one sequence at max_model_len "
                                               "beyond the window); a step with more runs eagerly on the tier")

    def __post_init__(self) -> None:
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:  # asked-for int8 / fp8 KV must not silently stay 16-bit
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got "
                             f"{self.kv_cache_dtype!r}")
        if self.kv_cache_mib is not None and self.kv_cache_mib < 1:
            raise ValueError(f"kv_cache_mib must be at least 1 (MiB), got {self.kv_cache_mib}")
        if self.kv_resident_tokens < 0 or (self.kv_host_mib is not None and self.kv_host_mib < 0):
            raise ValueError("kv_resident_tokens and kv_host_mib must not be negative")
        if self.kv_staging_tokens is not None and self.kv_staging_tokens < self.block_size:
            raise ValueError(f"kv_staging_tokens={self.kv_staging_tokens}: a ring entry holds at least one block "
                             f"({self.block_size} tokens)")
        if self.kv_staging_layers < 0 or (self.kv_staging_layers and not self.kv_resident_tokens):
            raise ValueError(f"kv_staging_layers={self.kv_staging_layers}: staging needs KV beyond VRAM "
                             f"(--kv-resident-tokens) and a ring of at least one layer (0: no staging)")
        if self.kv_resident_tokens and self.kv_resident_tokens < self.block_size:
            raise ValueError(f"kv_resident_tokens={self.kv_resident_tokens} is smaller than one KV block "
                             f"({self.block_size} tokens); pass 0 (all resident) or at least {self.block_size}")

    @property
    def kv_offload(self) -> bool:
        """Whether sequences keep only their newest kv_resident_tokens of KV on the device."""
        return self.kv_resident_tokens > 0


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = _opt(8, "maximum concurrent requests (slots)")
    max_num_batched_tokens: int = _opt(2048, "token budget of one step (prompt chunks + decode)")
    max_model_len: int | None = _opt(None, "maximum prompt + output length (default: the model's, or what the KV "
                                           "pool holds where that is less)")
    policy: str = _opt("fcfs", "admission order: fcfs | shortest-prompt-first")
    admission_hold_steps: int | None = _opt(None, "leave free slots empty for up to this many steps while a running "
                                                  "request will reach its length limit within them, so waiting prompts "
                                                  "are admitted together (a prompt step of an MoE reads most experts "
                                                  "whether it carries one prompt or several); 0: admit at once; "
                                                  "default: 1 for MoE models, 0 for dense ones")
    async_scheduling: bool = _opt(True, "plan the next decode step while the current one runs on the device, "
                                        "so the host's per-step work overlaps it (decode steps without drafts; "
                                        "a request that stops there wastes one token)")

    def __post_init__(self) -> None:
        if self.admission_hold_steps is not None and self.admission_hold_steps < 0:
            raise ValueError(f"admission_hold_steps must be 0 (admit at once) or more, got {self.admission_hold_steps}")

    def resolved_for(self, model: ModelConfig) -> SchedulerConfig:
        """This config with its model-dependent defaults filled in: admission_hold_steps 1 for an MoE model (its
        prompt steps read most experts however many prompts they carry; session 37 measured one step of hold
        on Qwen3-Next: 4 streams 1.36-1.44x speculation against 1.32-1.33x), 0 for a dense one."""
        if self.admission_hold_steps is not None:
            return self
        return dataclasses.replace(self, admission_hold_steps=1 if model.num_experts > 0 else 0)


SPEC_METHODS = ("mtp", "suffix", "mtp+suffix", "synthetic", "auto")
MAX_SPEC_TOKENS = 15  # a verify window (1 + k) must stay a "short" window of the attention/GDN paths


@dataclass(frozen=True)
class SpecConfig:
    """vLLM's option shape: `{"method": ..., "num_speculative_tokens": k}`; method None = off."""

    method: str | None = None
    num_speculative_tokens: int = 3
    acceptance_length: float | None = None   # "synthetic" only: mean accepted length, bonus included
    draft_prob_floor: float = 0.0            # stop drafting once the drafter's own probability is lower
    adaptive: bool = True                    # k falls as the batch grows or acceptance drops
    suffix_max_ngram: int = 4

    @classmethod
    def from_json(cls, text: str | dict | None) -> SpecConfig:
        import json

        if text in (None, "", "null"):
            return cls()
        data = json.loads(text) if isinstance(text, str) else dict(text)
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"speculative_config has unknown keys {sorted(unknown)}; known: "
                             f"{[f.name for f in dataclasses.fields(cls)]}")
        return cls(**data).validated()

    def validated(self) -> SpecConfig:
        if self.method is None:
            return self
        if self.method not in SPEC_METHODS:
            raise ValueError(f"speculative_config method {self.method!r} is unknown; choose one of "
                             f"{', '.join(SPEC_METHODS)}")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or not 1 <= k <= MAX_SPEC_TOKENS:
            raise ValueError(f"num_speculative_tokens must be an integer in [1, {MAX_SPEC_TOKENS}], got {k!r}")
        if self.method == "synthetic":
            if self.acceptance_length is None or not 1.0 <= self.acceptance_length <= k + 1:
                raise ValueError(f"synthetic speculation needs acceptance_length in [1, k + 1 = {k + 1}], "
                                 f"got {self.acceptance_length}")
        if not 0.0 <= self.draft_prob_floor < 1.0:
            raise ValueError(f"draft_prob_floor must be in [0, 1), got {self.draft_prob_floor}")
        return self

    @property
    def enabled(self) -> bool:
        return self.method is not None

    @property
    def uses_mtp(self) -> bool:
        return self.method in ("mtp", "mtp+suffix")


@dataclass(frozen=True)
class RunnerConfig:
    device: str = _opt("auto", "auto | cpu | cuda")
    dtype: str = _opt("auto", "auto | float32 | bfloat16 | float16 (auto: bfloat16 on GPU, float32 on CPU)")
    seed: int = _opt(0, "seed of random weights and of unseeded sampling")
    cuda_graphs: bool = _opt(True, "CUDA only: replay decode/verify steps from CUDA graphs (--no-cuda-graphs: eager)")
    cuda_graph_cache_size: int = _opt(
        0, "CUDA graphs kept (one per layout: padded slot count x tokens per slot); least recently used go first. "
           "0: every layout of the warm-up ladder (decode, verification windows, fresh prompts)")
    cuda_graph_max_slots: int = _opt(32, "largest padded slot count captured as a graph; bigger steps run eager")
    cuda_graph_prompt_tokens: int = _opt(
        512, "fresh prompts up to this many tokens (rounded down to a power of two) replay graphs, padded to "
             "a power of two, several per graph, also beside running requests; 0: such steps run eager. "
             "Models with Gated DeltaNet layers take prompts of up to 256 tokens; offloaded experts always "
             "run them eager")
    cuda_graph_warmup: bool = _opt(True, "capture the decode/verify layouts at start (up to the cache size) "
                                         "instead of when a step first needs one")
    gpu_memory_utilization: float = _opt(
        0.9, "fraction of the GPU's total memory the engine may use (weights, KV, states, graphs, activations)")
    vram_reserve_mib: int = _opt(0, "MiB of GPU memory left untouched on top of what utilization leaves")
    gpu_memory_limit_mib: int = _opt(
        0, "plan as if the GPU had this many MiB (a 24 GB card on a larger one; utilization and the reserve "
           "apply to it); 0: the device's memory")
    torch_threads: int = _opt(
        0, "torch's CPU threads in the engine process, set once at start (0: auto: the cores this process may "
           "use less one, divided among a CPU split's stages, at least 1, at most torch's current count, "
           "which follows OMP_NUM_THREADS; idle "
           "OpenMP threads spin, so a thread per core collapses when anything else needs a core; a long prompt "
           "chunk's attention, one large call, takes every core of the share; a count given here holds for all)")
    cpu_matmul: str = _opt(
        "auto", "float32 models with packed GGUF weights on the CPU: exact (each weight decoded to gguf's "
                "float32 value, float32 sums: the dense dequantized model's numbers, as HF transformers "
                "computes them) | int8 (activations quantized per block to int8 with a float32 scale, as "
                "llama.cpp does: ~0.5-1 % of each product off; a batched request may then drift from the same "
                "request alone, as its activations round differently) | auto: int8 where most multiplied bytes "
                "(not the gathered embedding and PLE tables) are K-quants or i-quants (on the 2-core AVX2 VM "
                "their exact decode took 1.7-5x int8's time at one row, 1.1-2.2x at eight: a 4-layer "
                "Qwen3-30B-A3B Q4_K_M decoded 37 tok/s against 12), else exact (the 32-value block types such "
                "as the bundled Q4_1: 0.9-1.4x at one row, 0.6-1.1x at eight, so exact decodes about as fast and "
                "faster in batches)")

    pipeline_parallel_size: int = _opt(
        1, "split the layers over this many processes, one per device (GPUs of one host; CPU processes over gloo "
           "on a CPU): activations cross at the split points; each stage's CUDA graphs hold its own layers; "
           "decode steps are planned ahead (--async-scheduling) with the sampled tokens sent to every stage")
    batch_groups: int = _opt(
        0, "with --pipeline-parallel-size: steps of this many groups of slots in flight at once, so group g runs "
           "on stage s while group g+1 runs on stage s-1 (the running requests shared evenly among the groups, "
           "each at most max_num_seqs / N); 0: as many as there are stages; 1: one group")

    @property
    def num_batch_groups(self) -> int:
        """Steps in flight at once (1 without a split)."""
        return self.batch_groups or self.pipeline_parallel_size

    def __post_init__(self) -> None:
        if self.pipeline_parallel_size < 1:
            raise ValueError(f"pipeline_parallel_size must be at least 1, got {self.pipeline_parallel_size}")
        if self.batch_groups < 0:
            raise ValueError(f"batch_groups must be 0 (auto) or more, got {self.batch_groups}")
        if self.batch_groups > 1 and self.pipeline_parallel_size == 1:
            raise ValueError("batch_groups above 1 needs a pipeline split (--pipeline-parallel-size 2 or more): "
                             "without one there is no other stage to keep busy")
        if self.cpu_matmul not in CPU_MATMULS:
            raise ValueError(f"cpu_matmul must be one of {', '.join(CPU_MATMULS)}, got {self.cpu_matmul!r}")


CPU_MATMULS = ("auto", "int8", "exact")
EXPERT_SPLITS = ("uniform", "static")
CPU_EXPERT_KERNELS = ("auto", "native", "torch")


@dataclass(frozen=True)
class ExpertConfig:
    """Where a MoE model's routed experts live: `expert_cache` device slots (the hot set), every expert
    in host RAM, misses computed by a CPU thread pool or copied over PCIe. The default keeps every
    expert on the device."""

    expert_cache: str = _opt("auto", "device expert slots over all MoE layers: auto | all | N | P% "
                                     "(auto: all when they fit on the GPU, else what fits after the other "
                                     "weights, the step headroom and a KV reserve)")
    expert_profile: str | None = _opt(None, "routing profile JSON (`strata profile`): fills the hot set at "
                                            "start when the file exists, saved on exit")
    expert_split: str = _opt("static", "hot set without a profile: static (first layers whole, like llama.cpp "
                                       "--n-cpu-moe: the other layers' host work only) | uniform (the same share of "
                                       "every layer)")
    cpu_threads: int = _opt(0, "worker threads computing non-resident experts (0: torch's thread count)")
    cpu_expert_kernel: str = _opt("auto", "how the CPU computes experts: auto (the native kernel, built with "
                                          "the system C compiler at first use; torch when it cannot be built) | "
                                          "native | torch")
    pcie_frac: str = _opt("0", "fraction of each layer's missed experts copied to spare device slots and "
                               "run there instead of on the CPU; auto: balanced from measured CPU and PCIe speed")
    zero_copy_frac: str = _opt("auto", "fraction of each MoE layer's experts that the device reads in place from "
                                       "pinned host memory over PCIe, beside the CPU pool: the most routed ones "
                                       "outside the hot set (packed GGUF experts on CUDA; steps of up to 4 token rows, "
                                       "larger ones send them to the CPU); auto: 20 % of each layer's experts outside "
                                       "the hot set where the device can read them so, else none; measure: that "
                                       "share balanced from the CPU pool's and the device's speed, timed at start")
    prompt_stream_min_pairs: int = _opt(6, "offloaded experts that at least this many of one step's tokens route "
                                           "to are copied over PCIe (in rounds through the staging slots) and run "
                                           "on the device instead of the CPU: prompt chunks (6: a 64-token prompt's "
                                           "most used experts go over PCIe beside the CPU); 0: never")
    expert_swap_interval: int = _opt(32, "steps between hot-set updates from routing counts (0: never)")
    expert_swap_threshold: float = _opt(
        0.25, "swap an expert in only if it was routed to (1 + threshold)x as often as the one it replaces")
    expert_budget: int = _opt(0, "with offloaded experts: most distinct experts one step should touch per layer; "
                                 "the scheduler caps tokens per step to match (0: no bound)")

    def __post_init__(self) -> None:
        self.validated()  # a bad value fails when the config is built, before any weights load

    def validated(self) -> ExpertConfig:
        self.parse_cache()
        if self.expert_split not in EXPERT_SPLITS:
            raise ValueError(f"expert_split must be one of {', '.join(EXPERT_SPLITS)}, got {self.expert_split!r}")
        for name in ("cpu_threads", "expert_swap_interval", "expert_budget", "prompt_stream_min_pairs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        self.parse_pcie_frac()
        if self.cpu_expert_kernel not in CPU_EXPERT_KERNELS:
            raise ValueError(f"cpu_expert_kernel must be one of {', '.join(CPU_EXPERT_KERNELS)}, "
                             f"got {self.cpu_expert_kernel!r}")
        self.parse_zero_copy_frac()
        if self.expert_swap_threshold < 0:
            raise ValueError(f"expert_swap_threshold must be >= 0, got {self.expert_swap_threshold!r}")
        return self

    def parse_pcie_frac(self) -> float | None:
        """The PCIe share in [0, 1], or None for auto (measured when the experts are placed)."""
        if str(self.pcie_frac).strip().lower() == "auto":
            return None
        try:
            value = float(self.pcie_frac)
        except ValueError:
            value = -1.0
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"pcie_frac must be auto or a number in [0, 1], got {self.pcie_frac!r}")
        return value

    def parse_zero_copy_frac(self) -> float | str:
        """The share of each MoE layer's experts read in place, in [0, 1], or "auto" / "measure" (a share of the
        experts outside the hot set, where the device can read them in place: ExpertManager's placement decides)."""
        text = str(self.zero_copy_frac).strip().lower()
        if text in ("auto", "measure"):
            return text
        try:
            value = float(self.zero_copy_frac)
        except (TypeError, ValueError):
            value = -1.0
        if isinstance(self.zero_copy_frac, bool) or not 0.0 <= value <= 1.0:
            raise ValueError(f"zero_copy_frac must be auto, measure or a number in [0, 1], got {self.zero_copy_frac!r}")
        return value

    @property
    def is_auto(self) -> bool:
        return str(self.expert_cache).strip().lower() == "auto"

    def parse_cache(self) -> int | float | None:
        """None = all experts (auto, all); an int = that many slots; a float in [0, 1] = a share (P%)."""
        text = str(self.expert_cache).strip().lower()
        if text in ("auto", "all"):
            return None
        try:
            if text.endswith("%"):
                share = float(text[:-1]) / 100
                if 0.0 <= share <= 1.0:
                    return share
            elif int(text) >= 0:
                return int(text)
        except ValueError:
            pass
        raise ValueError(f"expert_cache must be auto, all, a number of slots (e.g. 512) or a share of all "
                         f"experts (e.g. 25%), got {self.expert_cache!r}")

    def num_slots(self, total_experts: int) -> int:
        """Device expert slots for a model with `total_experts` routed experts over all MoE layers."""
        parsed = self.parse_cache()
        if parsed is None:
            return total_experts
        if isinstance(parsed, float):
            return round(parsed * total_experts)
        return min(parsed, total_experts)


@dataclass(frozen=True)
class EngineConfig:
    model: str = _opt("", "HF model folder, .gguf file, random:<shape>[?k=v] or a built-in name")
    chat_template: str = _opt("", "a Jinja chat template to use in place of the model's: a file, or the template "
                                  "itself")
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    speculative: SpecConfig = field(default_factory=SpecConfig)
    experts: ExpertConfig = field(default_factory=ExpertConfig)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch  # local: the config package itself stays torch-free for the scheduler and server

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype != "auto":
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {dtype!r}")
        return dtype
    return "float32" if device == "cpu" else "bfloat16"


def debug_flag(name: str) -> bool:
    """The one place environment switches are read (debugging only)."""
    return debug_value(name) not in ("", "0")


def debug_value(name: str) -> str:
    """An environment switch's raw value ("" when unset), for switches with more than two settings."""
    return os.environ.get(f"STRATA_{name}", "")
