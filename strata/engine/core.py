"""The engine core: one model, one scheduler, one runner, and the step loop
`schedule -> execute -> update`, plus output processing (detokenization, stop strings).

Requests are validated before they reach the scheduler. An exception inside a step fails the requests
of that step with an error delta; the engine keeps serving the others.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import time

import torch

from strata.cache.block_allocator import blocks_needed
from strata.cache.pools import KVPool
from strata.config import EngineConfig, ModelConfig, SpecConfig, resolve_device, resolve_dtype
from strata.engine.detokenizer import TextStream
from strata.experts.manager import install_experts
from strata.experts.placement import tokens_for_expert_budget
from strata.model.registry import model_class
from strata.runner.memory import GiB, GpuBudget, ModelDoesNotFit, activation_headroom, auto_expert_slots, \
    check_weights_fit, kv_reserve_tokens, measure_budget, meta_model, weight_sizes
from strata.runner.model_runner import ModelRunner, RestoreFailed
from strata.scheduler.scheduler import Commit, Scheduler
from strata.scheduler.stats import StepTimes
from strata.tokenizer import load_tokenizer
from strata.types import FinishReason, Request, TokenDelta
from strata.weights.loader import DTYPES, build_model
from strata.weights.source import open_source

logger = logging.getLogger(__name__)

_CPU_KV_BUDGET_BYTES = 1 << 30


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


class EngineCore:
    def __init__(self, config: EngineConfig, quiet: bool = False, model: torch.nn.Module | None = None) -> None:
        """`model`: another engine's model (same config) to share instead of loading the weights again,
        e.g. a benchmark's no-speculation baseline beside the speculating engine; its experts keep
        that engine's placement."""
        self.config = config
        device = resolve_device(config.runner.device)
        dtype = resolve_dtype(config.runner.dtype, device)
        source = open_source(config.model)
        self.model_config: ModelConfig = source.model_config()
        cfg = self.model_config
        self.max_model_len = config.scheduler.max_model_len or cfg.max_position_embeddings
        expert_device, expert_config = None, config.experts
        self.auto_expert_slots: int | None = None
        if device.startswith("cuda") and model is None:
            meta = meta_model(model_class(cfg), cfg)
            sizes = weight_sizes(meta, DTYPES[dtype])
            resident = expert_config.num_slots(sizes.num_experts)
            if expert_config.is_auto and sizes.num_experts:
                resident = self.auto_expert_slots = self._auto_expert_slots(sizes, meta, DTYPES[dtype])
                if resident < sizes.num_experts:
                    expert_config = dataclasses.replace(expert_config, expert_cache=str(resident))
            if resident < sizes.num_experts:
                expert_device = "cpu"  # load experts to host RAM; only the hot set is copied to the GPU
            check_weights_fit(sizes.on_device(resident), self._gpu_budget(), config.runner.gpu_memory_utilization,
                              config.runner.vram_reserve_mib)
        if model is None:
            model = build_model(source, device, dtype, config.runner.seed, quiet=quiet, expert_device=expert_device)
            self.experts = install_experts(model, expert_config, device, quiet=quiet)
        else:
            self.experts = getattr(model, "expert_manager", None)
        self.tokenizer = load_tokenizer(config.model)
        if self.max_model_len > cfg.max_position_embeddings:
            raise ValueError(f"max_model_len {self.max_model_len} exceeds the model's "
                             f"max_position_embeddings {cfg.max_position_embeddings}")
        self.spec = resolve_spec(config.speculative, model)
        self.memory_plan: dict = {}
        num_blocks = self._num_kv_blocks(model, device, DTYPES[dtype])
        block_size = config.cache.block_size
        recurrent = bool(model.recurrent_state_shapes())
        checkpoints = config.cache.checkpoint_pool_size if recurrent and config.cache.enable_prefix_caching else 0
        park_rows = self._conversation_cache_rows(model, device, DTYPES[dtype]) if config.cache.enable_prefix_caching \
            else (0, 0)
        self.runner = ModelRunner(model, num_blocks, block_size, config.scheduler.max_num_seqs, device,
                                  config.runner.seed, self.spec, checkpoints, park_rows, config.runner,
                                  self.max_model_len)
        self.scheduler = Scheduler(config.scheduler, config.cache, num_blocks, self.max_model_len,
                                   cfg.eos_token_ids, self.spec, has_recurrent_state=recurrent, park_rows=park_rows)
        self.scheduler.uniform_draft_windows = self.runner.graphs is not None
        if self.experts is not None and self.experts.offloaded:
            self.scheduler.expert_token_budget = tokens_for_expert_budget(
                cfg.num_experts, cfg.num_experts_per_tok, config.experts.expert_budget)
        self.park_rows = park_rows
        if not quiet:
            print(f"KV cache: {num_blocks} blocks of {block_size} tokens; prefix caching "
                  f"{'on' if config.cache.enable_prefix_caching else 'off'}; checkpoints: {checkpoints}; "
                  f"conversation cache: {park_rows[0]} blocks + {park_rows[1]} checkpoints in host RAM",
                  file=sys.stderr)
        self.device, self.dtype, self.num_kv_blocks = device, dtype, num_blocks
        self.streams: dict[str, TextStream | None] = {}
        self.step_times = StepTimes()
        self.async_scheduling = config.scheduler.async_scheduling
        self._ahead = None  # --async-scheduling: (plan, DecodeInFlight) queued but not yet read
        self._gpu_numbers_cache: tuple[float, dict | None] = (-1e9, None)

    def _num_kv_blocks(self, model, device: str, dtype: torch.dtype) -> int:
        cfg, cache, sched = self.model_config, self.config.cache, self.config.scheduler
        per_seq = blocks_needed(self.max_model_len, cache.block_size)
        if cache.num_gpu_blocks is not None:
            num_blocks = cache.num_gpu_blocks
        else:
            num_layers = len(cfg.full_attention_layers) + int(model.has_mtp)
            per_block = KVPool.bytes_per_block(max(num_layers, 1), cache.block_size, cfg.num_key_value_heads,
                                               cfg.head_dim, dtype)
            budget = _CPU_KV_BUDGET_BYTES
            if device.startswith("cuda"):
                budget = self._gpu_kv_bytes(model, dtype, per_block * per_seq)
            # at most enough for every slot at max length; what is left of that serves the prefix cache
            num_blocks = min(per_seq * sched.max_num_seqs, max(budget // per_block, 1))
        if num_blocks < per_seq:
            raise ValueError(f"the KV pool holds {num_blocks} blocks of {cache.block_size} tokens, fewer than "
                             f"one sequence of max_model_len={self.max_model_len} needs ({per_seq}); "
                             f"lower max_model_len or raise num_gpu_blocks")
        return num_blocks

    def _auto_expert_slots(self, sizes, meta: torch.nn.Module, dtype: torch.dtype) -> int:
        """--expert-cache auto on CUDA: every expert when the model fits with a KV reserve for
        max_num_seqs sequences (up to KV_RESERVE_TOKENS_PER_SEQ tokens each), else what fits."""
        cfg, sched, experts = self.model_config, self.config.scheduler, self.config.experts
        spec = self.config.speculative
        window = 1 + (spec.num_speculative_tokens if spec.enabled else 0)
        headroom = activation_headroom(cfg, sched.max_num_batched_tokens, sched.max_num_seqs, window,
                                       meta.recurrent_state_shapes(), dtype)
        num_layers = len(cfg.full_attention_layers) + int(meta.has_mtp)
        block = self.config.cache.block_size
        reserve_blocks = blocks_needed(kv_reserve_tokens(self.max_model_len, sched.max_num_seqs), block)
        kv_reserve = reserve_blocks * KVPool.bytes_per_block(max(num_layers, 1), block, cfg.num_key_value_heads,
                                                             cfg.head_dim, dtype)
        pcie = experts.parse_pcie_frac()
        staging = 0 if pcie == 0 else min(cfg.num_experts, 8 * cfg.num_experts_per_tok)
        slots = auto_expert_slots(sizes, self._gpu_budget().available, headroom, kv_reserve, staging)
        if slots < sizes.num_experts:
            logger.warning("expert_cache=auto: %d of %d routed experts fit on the GPU (KV reserve %.1f GiB, "
                           "step headroom %.1f GiB); the rest run from host RAM", slots, sizes.num_experts,
                           kv_reserve / GiB, headroom / GiB)
        return slots

    def _gpu_budget(self) -> GpuBudget:
        return measure_budget(self.config.runner.gpu_memory_utilization, self.config.runner.vram_reserve_mib)

    def _gpu_kv_bytes(self, model, dtype: torch.dtype, one_sequence_bytes: int) -> int:
        """What the KV pool may take: the allowed memory minus what is in use (weights) and the step
        headroom; a clear error when not even one sequence of max_model_len fits."""
        runner, sched = self.config.runner, self.config.scheduler
        window = 1 + (self.spec.num_speculative_tokens if self.spec.enabled else 0)
        headroom = activation_headroom(self.model_config, sched.max_num_batched_tokens, sched.max_num_seqs, window,
                                       model.recurrent_state_shapes(), dtype)
        budget = self._gpu_budget()
        kv_bytes = budget.available - headroom
        self.memory_plan = {"total_bytes": budget.total, "allowed_bytes": budget.allowed,
                            "in_use_after_weights_bytes": budget.in_use, "headroom_bytes": headroom,
                            "kv_budget_bytes": kv_bytes, "auto_expert_slots": self.auto_expert_slots}
        if kv_bytes < one_sequence_bytes:
            raise ModelDoesNotFit(
                f"after the weights, {max(kv_bytes, 0) / GiB:.2f} GiB are left for the KV cache (a step headroom "
                f"of {headroom / GiB:.2f} GiB set aside; {budget.describe(runner.gpu_memory_utilization, runner.vram_reserve_mib)}) "
                f"but one sequence of max_model_len={self.max_model_len} needs {one_sequence_bytes / GiB:.2f} GiB; "
                f"lower --max-model-len, --max-num-seqs or --max-num-batched-tokens, or raise --gpu-memory-utilization")
        return kv_bytes

    def _conversation_cache_rows(self, model, device: str, dtype: torch.dtype) -> tuple[int, int]:
        """Host-RAM rows for parked (KV blocks, checkpoints) from --conversation-cache-mib; a quarter
        goes to checkpoints on hybrid models."""
        mib = self.config.cache.conversation_cache_mib
        if mib is None:
            mib = 4096 if device.startswith("cuda") else 0
        if mib <= 0:
            return 0, 0
        cfg, budget = self.model_config, mib * 2**20
        num_layers = len(cfg.full_attention_layers) + int(model.has_mtp)
        block_bytes = KVPool.bytes_per_block(num_layers, self.config.cache.block_size, cfg.num_key_value_heads,
                                             cfg.head_dim, dtype)
        shapes = model.recurrent_state_shapes()
        if not shapes:
            return budget // block_bytes, 0
        checkpoint_bytes = sum(math.prod(conv) * dtype.itemsize + math.prod(ssm) * 4 for conv, ssm in shapes.values())
        checkpoint_rows = max(budget // 4 // checkpoint_bytes, 1)
        return max((budget - checkpoint_rows * checkpoint_bytes) // block_bytes, 0), checkpoint_rows

    # ---- requests --------------------------------------------------------------------------------

    def validate(self, request: Request) -> None:
        ids = request.prompt_token_ids
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the prompt has {len(ids)} tokens; max_model_len is {self.max_model_len}, "
                             f"which leaves no room for output")
        vocab = self.model_config.vocab_size
        if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
            raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        request.sampling_params.validate()

    def add_request(self, request: Request) -> None:
        self.validate(request)
        if not request.arrival_time:
            request.arrival_time = time.monotonic()
        self.scheduler.add_request(request)
        self.streams[request.request_id] = (TextStream(self.tokenizer, request.prompt_token_ids,
                                                       request.sampling_params)
                                            if self.tokenizer is not None else None)

    def abort_request(self, request_id: str) -> TokenDelta | None:
        state = self.scheduler.finish_request(request_id, FinishReason.ABORT)
        stream = self.streams.pop(request_id, None)
        if state is None:
            return None
        text = stream.flush() if stream is not None else ""
        return TokenDelta(request_id, [], text, True, FinishReason.ABORT)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def set_runtime_options(self, *, cuda_graphs: bool | None = None, async_scheduling: bool | None = None,
                            max_num_seqs: int | None = None) -> None:
        """Switches a benchmark flips between runs of one engine (None: leave as is): CUDA graphs on or
        off (off only where they were built), overlapped scheduling, and fewer concurrent slots than the
        engine was built for. Only between steps: nothing may be in flight."""
        if self.has_unfinished() or self._ahead is not None:
            raise RuntimeError("set_runtime_options needs an idle engine: requests are still running")
        if cuda_graphs is not None:
            self.runner.set_cuda_graphs(cuda_graphs)
        if async_scheduling is not None:
            self.async_scheduling = async_scheduling
        if max_num_seqs is not None:
            self.scheduler.set_max_num_seqs(max_num_seqs)

    # ---- the loop --------------------------------------------------------------------------------

    def step(self) -> list[TokenDelta]:
        started = time.perf_counter()
        if self._ahead is not None or self.async_scheduling:
            return self._step_overlapped(started)
        return self._step_plan(self.scheduler.schedule(), started)

    def _step_plan(self, plan, started: float) -> list[TokenDelta]:
        """One step run start to finish: launch, wait for the tokens, commit."""
        try:
            result = self.runner.execute(plan)
        except RestoreFailed as e:  # a cached prefix could not be copied back: read it again instead
            self.scheduler.recompute_after_failed_restore(plan, e.slot_ids)
            return []
        except Exception as e:  # one bad step must not take the engine down
            logger.exception("step %d failed", plan.step_id)
            return self._fail_step(plan, e)
        deltas = [self._process(commit) for commit in self.scheduler.update(plan, result)]
        self.step_times.record(plan, result, time.perf_counter() - started)
        return deltas

    def _step_overlapped(self, started: float) -> list[TokenDelta]:
        """--async-scheduling: while a decode step runs on the device, the next one is planned and
        queued behind it (its inputs are the tokens being sampled, fed on the device), and only then
        is the first one read and committed; so the host's work of a step (commit, detokenize, plan,
        fill inputs, launch) overlaps the device's. Any step that is not plain decoding, or after
        which the next cannot be planned ahead (see Scheduler.schedule_ahead), runs as usual. A
        request that stops at a step already has the next one queued: its token there is dropped."""
        if self._ahead is None:
            plan = self.scheduler.schedule()
            if not self.async_scheduling or not self.scheduler.decodes_ahead(plan):
                return self._step_plan(plan, started)
            try:
                launched = self.runner.launch_decode(plan)
            except Exception as e:
                logger.exception("step %d failed", plan.step_id)
                return self._fail_step(plan, e)
        else:
            plan, launched = self._ahead
            self._ahead = None
        deltas = []
        ahead = self.scheduler.schedule_ahead(plan) if self.async_scheduling else None
        if ahead is not None:
            try:
                self._ahead = (ahead, self.runner.launch_decode(ahead, launched))
            except Exception as e:
                logger.exception("step %d failed", ahead.step_id)
                deltas = self._fail_step(ahead, e)
        try:
            result = self.runner.complete_decode(launched)
        except Exception as e:
            logger.exception("step %d failed", plan.step_id)
            return deltas + self._fail_step(plan, e)
        deltas += [self._process(commit) for commit in self.scheduler.update(plan, result)]
        self.step_times.record(plan, result, time.perf_counter() - started)
        return deltas

    def _process(self, commit: Commit) -> TokenDelta:
        state = commit.state
        reason = commit.finish_reason
        stream = self.streams.get(state.request_id)
        text = ""
        if stream is not None:
            text, stopped = stream.add(commit.new_token_ids)
            if stopped and reason is None:
                reason = FinishReason.STOP
                self.scheduler.finish_request(state.request_id, reason)
            if reason is not None and not stopped:
                text += stream.flush()
        if reason is not None:
            self.streams.pop(state.request_id, None)
        metrics = None
        if reason is not None:
            metrics = {**state.spec_stats.as_dict(), "num_preemptions": state.num_preemptions,
                       **state.expert_shares.as_dict()}
        return TokenDelta(state.request_id, commit.new_token_ids, text, reason is not None, reason,
                          commit.logprobs, len(state.prompt_token_ids), metrics=metrics,
                          num_cached_tokens=state.num_cached_tokens)

    def _fail_step(self, plan, error: Exception) -> list[TokenDelta]:
        self.scheduler.forget_checkpoint_saves(plan)
        slot_ids = {w.slot_id for w in plan.scheduled}
        failed = [s for s in self.scheduler.running if s.slot_id in slot_ids]
        deltas = []
        for state in failed:
            self.scheduler.finish_request(state.request_id, FinishReason.ERROR)
            self.streams.pop(state.request_id, None)
            deltas.append(TokenDelta(state.request_id, [], "", True, FinishReason.ERROR,
                                     error=f"{type(error).__name__}: {error}"))
        return deltas

    # ---- read-only views (server status, metrics) ------------------------------------------------

    def _gpu_numbers(self) -> dict | None:
        """Device memory and utilisation (utilisation needs NVML; memory alone is still worth showing).
        status() goes out with every step, so the driver is asked at most once a second."""
        if not self.device.startswith("cuda"):
            return None
        now = time.monotonic()
        cached_at, numbers = self._gpu_numbers_cache
        if now - cached_at < 1.0:
            return numbers
        free, total = torch.cuda.mem_get_info()
        try:
            utilization = torch.cuda.utilization() / 100
        except Exception:
            utilization = None
        numbers = {"name": torch.cuda.get_device_name(), "mem_total_bytes": total,
                   "mem_used_bytes": total - free, "utilization": utilization}
        self._gpu_numbers_cache = (now, numbers)
        return numbers

    def _memory_numbers(self) -> dict | None:
        if not self.device.startswith("cuda"):
            return None
        return {**self.memory_plan, "peak_allocated_bytes": torch.cuda.max_memory_allocated()}

    def status(self) -> dict:
        """Plain-data snapshot of occupancy: slots, queue and KV blocks."""
        sched = self.scheduler
        return {"max_num_seqs": sched.config.max_num_seqs, "num_running": len(sched.running),
                "num_waiting": len(sched.waiting), "num_free_slots": len(sched.free_slots),
                "kv_blocks_total": self.num_kv_blocks, "kv_blocks_free": sched.allocator.num_free,
                "speculative_method": self.spec.method, "steps": sched.stats.as_dict(),
                "step_times": self.step_times.as_dict(),
                "gpu": self._gpu_numbers(), "memory_plan": self._memory_numbers(),
                "experts": self.experts.snapshot() if self.experts is not None else None,
                "cuda_graphs": self.runner.graph_stats(),
                "cache": {**sched.cache_stats.as_dict(), "parked_blocks": len(sched.prefix.parked_blocks or ()),
                          "parked_checkpoints": len(sched.prefix.parked_checkpoints or ()),
                          "checkpoints": len(sched.checkpoints or ())}}
