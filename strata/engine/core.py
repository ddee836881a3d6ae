"""The engine core: one model, one scheduler, one runner, and the step loop
`schedule -> execute -> update`, plus output processing (detokenization, stop strings).

Requests are validated before they reach the scheduler. An exception inside a step fails the requests
of that step with an error delta; the engine keeps serving the others.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import torch

from strata import reasoning, structured
from strata.config import EngineConfig, ModelConfig
from strata.engine.build import LoadedModel, build_engine, grammar_tokenizer
from strata.engine.detokenizer import TextStream
from strata.runner.model_runner import RestoreFailed
from strata.runner.pipeline import SplitBroken
from strata.scheduler.scheduler import Commit
from strata.scheduler.stats import StepTimes
from strata.types import FinishReason, Request, TokenDelta

logger = logging.getLogger(__name__)

class EngineCore:
    def __init__(self, config: EngineConfig, quiet: bool = False, shared: LoadedModel | None = None) -> None:
        """`shared`: another engine's loaded model (same config) to use instead of loading the weights
        again (see LoadedModel)."""
        self.config = config
        parts = build_engine(config, quiet, shared)
        self.model_config: ModelConfig = parts.model_config
        self.loaded = parts.loaded
        self.experts = parts.loaded.experts
        self.tokenizer = parts.tokenizer
        self.spec = parts.spec
        self.memory = parts.memory
        self.runner, self.scheduler = parts.runner, parts.scheduler
        self.max_model_len, self.park_rows = parts.max_model_len, parts.park_rows
        self.device, self.dtype, self.num_kv_blocks = parts.device, parts.dtype, parts.num_kv_blocks
        self.streams: dict[str, TextStream | None] = {}
        self.step_times = StepTimes()
        self.async_scheduling = config.scheduler.async_scheduling
        self._ahead = None  # --async-scheduling: (kind, plan, DecodeInFlight | VerifyInFlight) queued, not yet read
        # --batch-groups under a pipeline split: steps launched, not yet finished, oldest first
        self.num_batch_groups = config.runner.num_batch_groups if self.runner.stage is not None else 1
        self._groups: deque = deque()
        self._gpu_numbers_cache: tuple[float, dict | None] = (-1e9, None)
        self.thinking_tokens = self.runner.sampler.thinking_tokens  # (build_engine set them from the tokenizer)

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
        params = request.sampling_params
        params.validate()
        if params.n != 1:
            raise ValueError(f"an engine request is one choice (n=1, got {params.n}); LLM.generate and the server "
                             f"submit one request per choice")
        if params.logit_bias and max(params.logit_bias) >= vocab:
            raise ValueError(f"logit_bias keys must be token ids in [0, {vocab})")
        if params.structured_outputs is not None:
            if self.tokenizer is None:
                raise ValueError("structured output needs the model's tokenizer, and this model has none")
            structured.check(params.structured_outputs, self._grammar_tokenizer())
        if params.thinking_budget is not None and self.thinking_tokens is None:
            raise ValueError("thinking_budget needs a model that thinks: this model's vocabulary has no "
                             f"{reasoning.THINK_OPEN} and {reasoning.THINK_CLOSE} tokens")

    def _grammar_tokenizer(self):
        return grammar_tokenizer(self.tokenizer, self.model_config)

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

    def close(self) -> None:
        """Release what outlives the engine object: a pipeline split's other processes."""
        self.runner.close()

    def has_unfinished(self) -> bool:
        """Requests to run, or steps still in flight: batch groups' (an aborted request's), or the step planned
        ahead for requests that all ended in the step before it (uniform windows: stepping drains it)."""
        return self.scheduler.has_unfinished() or bool(self._groups) or self._ahead is not None

    def set_runtime_options(self, *, cuda_graphs: bool | None = None, async_scheduling: bool | None = None,
                            max_num_seqs: int | None = None) -> None:
        """Switches a benchmark flips between runs of one engine (None: leave as is): CUDA graphs on or
        off (off only where they were built), overlapped scheduling, and fewer concurrent slots than the
        engine was built for. Only between steps: nothing may be in flight."""
        while self._groups and not self.scheduler.has_unfinished():  # steps of requests that ended meanwhile
            self._finish_oldest_group(plan_ahead=False)
        if self._ahead is not None and not self.scheduler.has_unfinished():  # one planned for requests that ended
            self.settle()
        if self.has_unfinished():
            raise RuntimeError("set_runtime_options needs an idle engine: requests are still running")
        if cuda_graphs is not None:
            self.runner.set_cuda_graphs(cuda_graphs)
        if async_scheduling is not None:
            self.async_scheduling = async_scheduling
        if max_num_seqs is not None:
            self.scheduler.set_max_num_seqs(max_num_seqs)

    def settle(self) -> list[TokenDelta]:
        """Between steps, make the caches hold what the scheduler's index says (session saves and
        restores read and write them only then): finish a step in flight without planning the next one
        ahead, then run what is queued for the runner -> the deltas of the step finished."""
        deltas = []
        while self._groups:
            deltas += self._finish_oldest_group(plan_ahead=False)
        if self._ahead is not None:
            self.async_scheduling, was = False, self.async_scheduling
            try:
                deltas = self.step()
            finally:
                self.async_scheduling = was
        self.run_pending()
        return deltas

    def run_pending(self) -> None:
        """Run now what the scheduler queued for the next step's runner (checkpoint saves, parks, freed
        slots); only with no step in flight."""
        self.runner.execute(self.scheduler.pending_plan())

    # ---- the loop --------------------------------------------------------------------------------

    def step(self) -> list[TokenDelta]:
        started = time.perf_counter()
        if self.num_batch_groups > 1:
            return self._step_groups(started)
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
        self._record_step_time(plan, result, started)
        return deltas

    def _record_step_time(self, plan, result, started: float) -> None:
        """The step's wall time, host work included, into the step-time split and the draft cost model
        (which so weighs a verification step's unoverlapped host work against plain steps planned ahead)."""
        elapsed = time.perf_counter() - started
        self.step_times.record(plan, result, elapsed)
        self.scheduler.observe_step_time(plan, elapsed)

    def _step_overlapped(self, started: float) -> list[TokenDelta]:
        """--async-scheduling: while a step runs on the device, the next one is planned and queued
        behind it, and only then is the first one read and committed; so the host's work of a step
        (commit, detokenize, plan, fill inputs, launch) overlaps the device's. Decode steps feed each
        slot the token being sampled on the device (Scheduler.schedule_ahead); verification steps of
        synthetic drafts start each window at the bonus token and move it back by the drafts the step
        before rejected, both on the device (Scheduler.schedule_verify_ahead, spec/verify_ahead.py). Any
        other step, or one after which the next cannot be planned ahead, runs as usual. A request that
        stops at a step already has the next one queued: its tokens there are dropped."""
        if self._ahead is None:
            plan = self.scheduler.schedule()
            kind = self._overlap_kind(plan)
            if kind is None:
                return self._step_plan(plan, started)
            try:
                launched = self._launch(kind, plan)
            except Exception as e:
                logger.exception("step %d failed", plan.step_id)
                return self._fail_step(plan, e)
        else:
            kind, plan, launched = self._ahead
            self._ahead = None
        deltas = []
        ahead = None
        if self.async_scheduling:
            ahead = (self.scheduler.schedule_ahead if kind == "decode" else self.scheduler.schedule_verify_ahead)(plan)
        if ahead is not None:
            try:
                self._ahead = (kind, ahead, self._launch(kind, ahead, launched))
            except Exception as e:
                logger.exception("step %d failed", ahead.step_id)
                deltas = self._fail_step(ahead, e)
        try:
            result = (self.runner.complete_decode if kind == "decode" else self.runner.complete_verify)(launched)
        except Exception as e:
            logger.exception("step %d failed", plan.step_id)
            return deltas + self._fail_step(plan, e)
        deltas += [self._process(commit) for commit in self.scheduler.update(plan, result)]
        self._record_step_time(plan, result, started)
        return deltas

    def _overlap_kind(self, plan) -> str | None:
        """How `plan` is launched so that the next step can be queued behind it: "decode", "verify", or None
        (run as usual)."""
        if not self.async_scheduling:
            return None
        if self.scheduler.decodes_ahead(plan):
            return "decode"
        if self.scheduler.verifies_ahead(plan) and self.runner.verifies_ahead(plan):
            return "verify"
        return None

    def _launch(self, kind: str, plan, inputs_from=None):
        if kind == "decode":
            return self.runner.launch_decode(plan, inputs_from)
        return self.runner.launch_verify(plan, inputs_from)

    def _step_groups(self, started: float) -> list[TokenDelta]:
        """--batch-groups: keep up to G steps in flight, each over slots the others do not hold (the running
        requests shared evenly among the groups), so while the split's later stages run one group the earlier
        ones run the next; then finish the oldest and commit it. With --async-scheduling a group's decode step
        is followed by the next one, planned and launched before it is read (see _finish_oldest_group)."""
        deltas = []
        scheduler = self.scheduler
        wanted = min(len(scheduler.running) + len(scheduler.waiting), scheduler.max_running)
        group_slots = max(-(-wanted // self.num_batch_groups), 1)
        while len(self._groups) < self.num_batch_groups:
            plan = scheduler.schedule(max_slots=group_slots)
            if plan.is_empty and self._groups and not plan.carries_work:
                break  # every running slot is in flight: nothing to add (an empty plan carrying work still goes)
            kind = "decode" if self.async_scheduling and scheduler.decodes_ahead(plan) else None
            try:
                launched = self.runner.launch_decode(plan) if kind else self.runner.launch(plan)
            except Exception as e:
                logger.exception("step %d failed", plan.step_id)
                deltas += self._fail_step(plan, e)
                break
            self._groups.append((plan, launched, started, kind))
            if plan.is_empty:
                break
        return deltas + self._finish_oldest_group() if self._groups else deltas

    def _finish_oldest_group(self, plan_ahead: bool = True) -> list[TokenDelta]:
        """Finish the oldest step in flight and commit it. A decode step's group first gets its next decode
        step, planned and launched behind the others (fed the tokens this one samples, on the device), so the
        host's work here overlaps every stage's."""
        plan, launched, started, kind = self._groups.popleft()
        deltas = []
        ahead = self.scheduler.schedule_ahead(plan, hold=True) if kind and plan_ahead else None
        if ahead is not None:
            try:
                self._groups.append((ahead, self.runner.launch_decode(ahead, launched), time.perf_counter(), kind))
            except Exception as e:
                logger.exception("step %d failed", ahead.step_id)
                deltas = self._fail_step(ahead, e)
        try:
            result = self.runner.complete_decode(launched) if kind else self.runner.finish(launched)
        except Exception as e:
            logger.exception("step %d failed", plan.step_id)
            return deltas + self._fail_step(plan, e)
        deltas += [self._process(commit) for commit in self.scheduler.update(plan, result)]
        self._record_step_time(plan, result, started)
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
                          num_cached_tokens=state.num_cached_tokens, prompt_logprobs=commit.prompt_logprobs)

    def _fail_step(self, plan, error: Exception) -> list[TokenDelta]:
        if self.runner.stage is not None:  # the split's other stages may be stuck inside this step
            self.runner.stage.broken = True
            raise SplitBroken(f"step {plan.step_id} failed on pipeline stage {self.runner.stage.rank} "
                              f"({type(error).__name__}: {error}); the stages are out of step, so the split "
                              f"engine stops") from error
        self.scheduler.forget_checkpoint_saves(plan)
        self.scheduler.land(plan)
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
        return {**self.memory.as_dict(), "peak_allocated_bytes": torch.cuda.max_memory_allocated()}

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
                          "pinned_blocks": len(sched.prefix.pins),
                          "parked_checkpoints": len(sched.prefix.parked_checkpoints or ()),
                          "checkpoints": len(sched.checkpoints or ())}}
