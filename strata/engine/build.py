"""Builds an engine's parts from its config: the model and its expert placement, the memory plan, the
tokenizer, the runner and the scheduler. Each component gets its own sub-config and explicit handles
to what it uses; nothing is attached to another object after it is built. EngineCore keeps the loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

import torch
from torch import nn

from strata import reasoning, structured
from strata.config import EngineConfig, ModelConfig, SpecConfig, kv_cache_torch_dtype, resolve_device, resolve_dtype
from strata.engine import pipeline_workers
from strata.engine.memory_plan import CacheSizes, MemoryPlan
from strata.experts.manager import ExpertManager, install_experts
from strata.experts.placement import tokens_for_expert_budget
from strata.model import cpu_sdpa
from strata.model.packed import set_cpu_matmul
from strata.model.registry import model_class
from strata.runner.memory import meta_model
from strata.runner import pipeline, session_rows
from strata.runner.model_runner import ModelRunner
from strata.scheduler.scheduler import Scheduler
from strata.spec.planner import DraftPlanner
from strata.tokenizer import load_tokenizer
from strata.weights.loader import DTYPES, build_model, lock_host_tables
from strata.types import StructuredOutputs
from strata.weights.source import open_source

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """Weights and expert placement, which a second engine of the same model may share (a benchmark's
    no-speculation baseline beside the speculating engine): its experts keep this placement."""

    model: nn.Module
    experts: ExpertManager | None


@dataclasses.dataclass
class EngineParts:
    model_config: ModelConfig
    loaded: LoadedModel
    tokenizer: object | None
    spec: SpecConfig
    memory: MemoryPlan
    runner: ModelRunner
    scheduler: Scheduler
    max_model_len: int
    device: str
    dtype: str
    num_kv_blocks: int
    park_rows: tuple[int, int]


def resolve_spec(spec: SpecConfig, model) -> SpecConfig:
    """Check the speculative configuration against the model before anything runs."""
    spec = spec.validated()
    if spec.method == "auto":
        method = "mtp" if model.has_mtp else "suffix"
        if not model.has_mtp:
            logger.warning("speculative method 'auto': the model has no MTP head, using suffix drafting")
        return dataclasses.replace(spec, method=method)
    if spec.uses_mtp and not model.has_mtp:
        raise ValueError(f"speculative method {spec.method!r} needs the model's MTP head, but "
                         f"{model.config.architecture} has no mtp.* weights here; use 'suffix' or 'auto'")
    return spec


def available_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one, e.g. under taskset or a
    cpuset), not the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def set_torch_threads(requested: int, processes: int = 1) -> int:
    """Set torch's intra-op thread count for this process and return it. 0 (auto): one core is left to
    the server's event loop, the OS and whatever else runs, and the rest are divided among the `processes`
    that compute on this machine's CPU at once (a pipeline split's stages; on GPUs, their CPU expert pools, which
    take torch's thread count unless --cpu-threads sets theirs); torch's own default
    (physical cores, or OMP_NUM_THREADS) stays the ceiling. Idle OpenMP threads spin-wait, so a team as
    large as the machine stalls whenever another process takes one core: measured in
    bench/results/2026-12-01-cpu-threads."""
    if not isinstance(requested, int) or requested < 0:
        raise ValueError(f"torch_threads must be an integer >= 0, got {requested!r}")
    threads = requested or max(1, min(torch.get_num_threads(), (available_cores() - 1) // max(1, processes)))
    torch.set_num_threads(threads)
    # one long op (a long prompt chunk's attention) may take this process's share of every core: a single
    # parallel region, which a busy core delays by a time slice at most (model/cpu_sdpa.py)
    cpu_sdpa.set_large_op_threads(0 if requested else max(threads, available_cores() // max(1, processes)))
    return threads


def build_engine(config: EngineConfig, quiet: bool = False, shared: LoadedModel | None = None,
                 stage_rank: int | None = None) -> EngineParts:
    """`stage_rank`: a pipeline stage's process builds its part of a split engine (runner/pipeline.py); the
    engine's own process (None) starts the other stages when --pipeline-parallel-size is above 1."""
    device = resolve_device(config.runner.device)
    if shared is None:  # a second engine beside a shared model runs in the same process: set once
        # a split: its stages' processes divide the cores (on GPUs, for their CPU expert pools: with batch
        # groups every stage computes at once, and pools as large as the machine would spin against each other)
        threads = set_torch_threads(config.runner.torch_threads, config.runner.pipeline_parallel_size)
        if not quiet:
            print(f"torch CPU threads: {threads} ({available_cores()} cores available)", file=sys.stderr)
    source = open_source(config.model)
    cfg = source.model_config()
    max_model_len = config.scheduler.max_model_len or cfg.max_position_embeddings
    if max_model_len > cfg.max_position_embeddings:
        raise ValueError(f"max_model_len {max_model_len} exceeds the model's "
                         f"max_position_embeddings {cfg.max_position_embeddings}")
    stage = _pipeline_stage(config, cfg, device, stage_rank, shared)
    try:
        return _build_parts(config, quiet, shared, device, source, cfg, max_model_len, stage)
    except BaseException:
        if stage is not None and stage.is_first:  # stop the other stages and leave the group: nothing stays behind
            stage.broken = True
            stage.close()
        raise


def _build_parts(config: EngineConfig, quiet: bool, shared: LoadedModel | None, device: str, source,
                 cfg: ModelConfig, max_model_len: int, stage) -> EngineParts:
    """build_engine once this process's pipeline stage (if any) has joined its split."""
    dtype = resolve_dtype(config.runner.dtype, device)
    if stage is not None and device.startswith("cuda"):  # a GPU per stage
        device = pipeline.stage_device(device, stage.rank, stage.world)
        torch.cuda.set_device(device)
    plan = loaded = None
    if shared is None:
        expert_config, expert_device = config.experts, None
        if device.startswith("cuda"):  # experts that do not fit are loaded to host RAM, not the GPU
            meta = meta_model(model_class(cfg), cfg)
            plan = _memory_plan(config, cfg, max_model_len, device, dtype, meta, stage)
            expert_config, expert_device = plan.expert_slots(meta, source.weight_sizes(DTYPES[dtype], plan.owned_layers))
        owned = range(stage.first_layer, stage.end_layer) if stage is not None else None
        model = build_model(source, device, dtype, config.runner.seed, quiet=quiet, expert_device=expert_device,
                            owned_layers=owned)
        loaded = LoadedModel(model, install_experts(model, expert_config, device, quiet=quiet))
        lock_host_tables(model, device, quiet)  # with the experts' host copies made: the RAM they leave
        if stage is not None:
            model.stage = stage
    loaded = loaded or shared
    file_types = source.bytes_by_type() if hasattr(source, "bytes_by_type") else None  # a GGUF's: every stage's
    cpu_matmul = set_cpu_matmul(loaded.model, config.runner.cpu_matmul, file_types)
    if config.runner.cpu_matmul == "auto" and cpu_matmul == "int8" and device == "cpu" and not quiet:
        print("cpu matmul: int8 activations (--cpu-matmul auto: most multiplied weights are K-quants or i-quants, "
              "whose exact float decode is several times slower on the CPU; --cpu-matmul exact keeps float32 "
              "activations)", file=sys.stderr)
    tokenizer = load_tokenizer(config.model, config.chat_template)
    spec = resolve_spec(config.speculative, loaded.model)
    plan = plan or _memory_plan(config, cfg, max_model_len, device, dtype, loaded.model, stage)
    sizes = plan.cache_sizes()
    if stage is not None:  # each stage planned its own card: every pool takes the smallest stage's size
        sizes = _agreed(stage, sizes)
    if plan.sized_context and not quiet and (plan.on_cuda or sizes.max_model_len < max_model_len):
        print(f"max_model_len: {sizes.max_model_len} tokens, sized from the memory plan (the model allows "
              f"{max_model_len}; --max-model-len sets it)", file=sys.stderr)
    max_model_len = sizes.max_model_len
    runner = ModelRunner(loaded.model, loaded.experts, sizes.num_kv_blocks, config.cache.block_size,
                         config.scheduler.max_num_seqs, device, config.runner.seed, spec, sizes.num_checkpoints,
                         sizes.park_rows, config.runner, max_model_len,
                         kv_cache_torch_dtype(config.cache.kv_cache_dtype, DTYPES[dtype]), sizes.num_host_kv_blocks,
                         sizes.kv_staging, stage)
    expert_token_budget = None
    if loaded.experts is not None and loaded.experts.offloaded:
        expert_token_budget = tokens_for_expert_budget(cfg.num_experts, cfg.num_experts_per_tok,
                                                       config.experts.expert_budget)
    scheduler = Scheduler(config.scheduler.resolved_for(cfg), config.cache, sizes.num_kv_blocks, max_model_len,
                          cfg.eos_token_ids, DraftPlanner(spec),
                          has_recurrent_state=bool(loaded.model.recurrent_state_shapes()),
                          park_rows=sizes.park_rows, uniform_draft_windows=runner.graphs is not None,
                          expert_token_budget=expert_token_budget, num_host_kv_blocks=sizes.num_host_kv_blocks)
    _give_the_tokenizer(runner, scheduler, tokenizer, cfg)
    if stage is not None:  # which stage holds which session tensors (strata/engine/sessions.py)
        stage.layouts = stage.gather(session_rows.layout(runner))
    plan.check_after_start(runner.graphs.pool_bytes if runner.graphs is not None else 0)
    if not quiet:
        if table := plan.table(sizes.num_kv_blocks):
            print(table, file=sys.stderr)
        print(f"KV cache: {sizes.num_kv_blocks} blocks of {config.cache.block_size} tokens; prefix caching "
              f"{'on' if config.cache.enable_prefix_caching else 'off'}; checkpoints: {sizes.num_checkpoints}; "
              f"conversation cache: {sizes.park_rows[0]} blocks + {sizes.park_rows[1]} checkpoints in host RAM"
              + (f"; KV beyond VRAM: the newest {config.cache.kv_resident_tokens} tokens of each sequence on the "
                 f"device, {sizes.num_host_kv_blocks} host blocks for the rest" if sizes.num_host_kv_blocks else ""),
              file=sys.stderr)
    return EngineParts(cfg, loaded, tokenizer, spec, plan, runner, scheduler, max_model_len, device, dtype,
                       sizes.num_kv_blocks, sizes.park_rows)


def grammar_tokenizer(tokenizer, cfg: ModelConfig):
    """llguidance's tokenizer over the model's vocabulary, built at the first structured request (about a second)
    and kept (structured.llg_tokenizer caches it)."""
    return structured.llg_tokenizer(tokenizer, cfg.vocab_size, tuple(cfg.eos_token_ids))


def _give_the_tokenizer(runner: ModelRunner, scheduler: Scheduler, tokenizer, cfg: ModelConfig) -> None:
    """What the sampler and scheduler take from the tokenizer, on every pipeline stage (the last one samples):
    grammar matchers for structured outputs and the thinking tokens of reasoning budgets (none without one)."""
    if tokenizer is not None:
        def new_matcher(constraint: StructuredOutputs):
            return structured.new_matcher(constraint, grammar_tokenizer(tokenizer, cfg))

        runner.sampler.constraints.new_matcher = new_matcher
    runner.sampler.thinking_tokens = scheduler.thinking_tokens = reasoning.thinking_tokens(tokenizer)


def _pipeline_stage(config: EngineConfig, cfg: ModelConfig, device: str, stage_rank: int | None,
                    shared: LoadedModel | None):
    """This process's pipeline stage (None without a split); the engine's own process starts the others."""
    world = config.runner.pipeline_parallel_size
    if world == 1:
        return None
    ranges = pipeline.layer_ranges(cfg.num_hidden_layers, world)
    if shared is not None:
        raise ValueError("a split engine (--pipeline-parallel-size) cannot share another engine's model")
    sharing = pipeline.shares_devices(device, world)
    if sharing and os.environ.get("STRATA_PIPELINE_SHARE_GPUS") != "1":
        raise ValueError(f"--pipeline-parallel-size {world} needs {world} GPUs; this machine has "
                         f"{torch.cuda.device_count()} (STRATA_PIPELINE_SHARE_GPUS=1 lets stages share one, "
                         f"to test the split: it is slower than no split)")
    if stage_rank is not None:
        return pipeline.Stage(stage_rank, world, *ranges[stage_rank], cfg.num_hidden_layers, host_activations=sharing)
    workers, port, config_file = pipeline_workers.start_workers(config, world)
    pipeline.join_group(0, world, port, device)
    os.unlink(config_file)
    return pipeline.Stage(0, world, *ranges[0], cfg.num_hidden_layers, workers, host_activations=sharing)


def _agreed(stage, sizes: CacheSizes) -> CacheSizes:
    agreed = stage.agree([sizes.num_kv_blocks, sizes.num_checkpoints, *sizes.park_rows, sizes.max_model_len,
                          sizes.num_host_kv_blocks, *sizes.kv_staging])
    return CacheSizes(agreed[0], agreed[1], (agreed[2], agreed[3]), agreed[4], agreed[5], (agreed[6], agreed[7]))


def _memory_plan(config: EngineConfig, cfg: ModelConfig, max_model_len: int, device: str, dtype: str,
                 model: nn.Module, stage) -> MemoryPlan:
    """`model`: the loaded model or a meta model of it (shapes only); `stage`: a pipeline stage's card."""
    torch_dtype: torch.dtype = DTYPES[dtype]
    return MemoryPlan(config, cfg, config.speculative, max_model_len, device, torch_dtype, model.has_mtp,
                      model.recurrent_state_shapes(), stage)
