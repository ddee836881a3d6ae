"""The model runner: owns the model, the KV and recurrent-state pools, per-slot block tables, the
sampler and the drafter; `execute(plan)` runs one forward for every scheduled slot, samples or
verifies where a slot reached the end of its window, commits, and proposes the next drafts.
For --async-scheduling, `launch_decode(plan)` queues a decode step up to its sampled tokens and
`complete_decode` reads and commits them later, so the next step can be queued in between
(runner/planned_decode.py).

Order inside a step matters: slots freed by the plan are released before new slots are set up,
because the scheduler may hand a freed slot id to a new request in the same plan.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import nn

from strata import progress
from strata.cache.pools import CheckpointPool, HostParkPool, KVPool, StatePool
from strata.config import MAX_SPEC_TOKENS, RunnerConfig, SpecConfig
from strata.kernels import triton_available
from strata.model.context import ForwardScratch
from strata.model.gated_delta_net import TRITON_MAX_QUERY_LEN
from strata.runner import session_rows
from strata.runner.cuda_graphs import CudaGraphCache
from strata.runner.graph_layouts import prompt_graph_rows, prompt_token_limit
from strata.runner.graph_inputs import GraphInputs
from strata.runner.inputs import StepInputs, build_inputs
from strata.runner.kv_staging import HostKVStaging
from strata.runner.kv_tiers import HostKVTiers
from strata.runner.table_arrays import TableArrays
from strata.sample import Sampler
from strata.sample.prompt_logprobs import PromptLogprobs
from strata.spec.commit import commit_outcomes
from strata.spec.speculator import Speculator
from strata.runner import graph_parts, planned_decode, planned_verification
from strata.runner.planned_decode import DecodeInFlight
from strata.spec.verify_ahead import VerifyInFlight
from strata.types import StepPlan, StepResult


logger = logging.getLogger(__name__)


class RestoreFailed(RuntimeError):
    """Copying cached KV or state back failed for these slots; nothing of the step has run."""

    def __init__(self, slot_ids: list[int]) -> None:
        super().__init__(f"prefix restore failed for slots {slot_ids}")
        self.slot_ids = slot_ids


@dataclass
class LaunchedStep:
    """A step launched and not yet finished (ModelRunner.launch / finish)."""

    plan: StepPlan
    spec: object = None            # the speculation outcome, where this process computed it
    window_states: dict | None = None
    expert_pairs: dict = field(default_factory=dict)
    started: float = 0.0
    forward_done: float = 0.0


class ModelRunner:
    def __init__(self, model: nn.Module, experts, num_blocks: int, block_size: int, max_num_seqs: int,
                 device: str, seed: int = 0, spec: SpecConfig | None = None, checkpoint_pool_size: int = 0,
                 park_rows: tuple[int, int] = (0, 0), options: RunnerConfig | None = None,
                 max_model_len: int | None = None, kv_dtype: torch.dtype | None = None,
                 num_host_kv_blocks: int = 0, kv_staging: tuple[int, int] = (0, 0), stage=None) -> None:
        """`kv_dtype`: what K and V are stored in (the model's dtype when None; float8 e4m3 for fp8 KV, int8
        with scales beside them for int8 KV). `num_host_kv_blocks`: the host tier of KV beyond VRAM
        (--kv-resident-tokens; 0: none). `kv_staging`: (ring layers, blocks an entry holds) of the host tier's
        staging ring (--kv-staging-layers; (0, 0): attention reads the tier itself). `stage`: this process's part
        of a pipeline split (runner/pipeline.py; None: the whole model): caches and graphs for its own layers only,
        the plan shared by stage 0 and the step's outcome by the last stage."""
        cfg = model.config
        options = options or RunnerConfig()
        spec = spec or SpecConfig()
        self.model = model
        self.device = device
        self.block_size = block_size
        dtype = next(model.parameters()).dtype
        kv_layers = cfg.full_attention_layers + ([cfg.num_hidden_layers] if model.has_mtp else [])
        state_shapes = model.recurrent_state_shapes()
        self.stage = stage
        if stage is not None:
            kv_layers = [layer for layer in kv_layers if stage.owns(layer)]
            state_shapes = {layer: shape for layer, shape in state_shapes.items() if stage.owns(layer)}
        self.experts = experts  # the model's ExpertManager (None without MoE layers)
        graphs = options.cuda_graphs and str(device).startswith("cuda") and graph_safe(model, dtype)
        check_kv_dtype(kv_dtype or dtype, device)
        # with graphs, one extra KV block and state row take the padding rows' writes
        index_keys = {key: width for key, width in model.index_key_layers().items() if stage is None or stage.owns(key)}
        self.kv_pool = KVPool(kv_layers, num_blocks + int(graphs), block_size, cfg.num_key_value_heads, cfg.head_dim,
                              dtype, device, index_keys, kv_dtype)
        self.state_pool = StatePool(state_shapes, max_num_seqs + int(graphs), dtype, device)
        self.host_kv = HostKVTiers(self.kv_pool, num_host_kv_blocks) if num_host_kv_blocks else None
        self.kv_staging = None
        if kv_staging[0]:
            if self.host_kv is None:
                raise ValueError("KV staging (--kv-staging-layers) needs KV beyond VRAM (--kv-resident-tokens)")
            # the MTP layer's blocks only when it drafts (otherwise its KV is never read)
            staged = cfg.full_attention_layers + ([cfg.num_hidden_layers] if spec.enabled and spec.method == "mtp"
                                                  and model.has_mtp else [])
            self.kv_staging = HostKVStaging(self.host_kv.pool, staged, *kv_staging, device)
        self.graphs = None
        max_len = max_model_len or cfg.max_position_embeddings
        # the attention kernel sizes its context splits by this table width whether or not graphs run,
        # so a step rounds alike replayed or eager (and with graphs on or off)
        self.split_table_width = -(-(max_len + MAX_SPEC_TOKENS + 1) // block_size)
        if graphs:
            max_slots = min(options.cuda_graph_max_slots, max_num_seqs)
            window = 1 + (spec.num_speculative_tokens if spec.enabled else 0)
            offloaded = self.experts is not None and self.experts.offloaded
            # fresh prompts in graphs: not with host work inside MoE layers (sized for decode rows); with recurrent
            # state only as long as the Triton kernels (their graph-safe path) take them
            prompt_tokens = 0 if offloaded else prompt_token_limit(
                min(options.cuda_graph_prompt_tokens, TRITON_MAX_QUERY_LEN if self.state_pool.caches else max_len),
                max_len)
            inputs = GraphInputs(max_slots, window, self.split_table_width,
                                 block_size, scratch_block=num_blocks, scratch_state_row=max_num_seqs, device=device,
                                 max_prompt_rows=prompt_graph_rows(prompt_tokens), host_tier=self.host_kv is not None)
            host_plan = None
            if offloaded:  # MoE layers split the graphs
                # the MoE layers' small transfers are made by kernels: one launch out where copy nodes took four
                # (issue 23's offload 108.0 against 100.6 tok/s on an H100, session 48), and beside the staging ring
                # they do not queue behind its copies (experts/provider.py HostExchange)
                self.experts.prepare_graphs(max_slots * window, dtype, device, by_sm=triton_available())
                host_plan = self.experts.graph_plan
            real_rows = self.experts.real_rows if self.experts is not None else None
            self.graphs = CudaGraphCache(model, inputs, self.kv_pool.caches, self.state_pool.caches, max_slots,
                                         window, options.cuda_graph_cache_size, host_plan, real_rows, prompt_tokens,
                                         self.host_kv, self.kv_staging)
            if options.cuda_graph_warmup:
                started = time.perf_counter()
                with progress.bar("capturing CUDA graphs", self.graphs.num_warm_up_keys()) as advance:
                    count = self.graphs.warm_up(advance)
                logger.info("captured %d CUDA graphs in %.1fs", count, time.perf_counter() - started)
        self.use_cuda_graphs = self.graphs is not None
        self.checkpoint_pool = CheckpointPool(self.state_pool, checkpoint_pool_size)
        self.host_park = HostParkPool(self.kv_pool, self.checkpoint_pool, *park_rows) if any(park_rows) else None
        self.sampler = Sampler(max_num_seqs, cfg.vocab_size, list(cfg.eos_token_ids), device, seed=seed)
        self.prompt_logprobs = PromptLogprobs()  # the slots whose requests asked for them (last stage's)
        self.block_tables: dict[int, list[int]] = {}
        self.table_arrays = TableArrays()  # their numpy copies, reused while a list is unchanged
        self.scratch = ForwardScratch()  # reset by every eager step's input builder
        self.graph_part_steps = 0  # steps replayed as several graph parts (graph_parts.py)
        self.graph_mixed_steps = 0  # steps of prompts beside windows replayed as one mixed graph (graph_parts.py)
        # a split's earlier stages with batch groups launch other groups' steps before a step's outcome comes
        # back from the last stage, and commit its windows (recurrent states) only then
        self._steps_between_launch_and_outcome = stage is not None and not stage.is_last and \
            options.num_batch_groups > 1
        self.speculation = Speculator(spec, model, self.sampler, self.state_pool.caches, self._mtp_context, seed)
        self._finished_through = -1  # the last step finished (a split's other stages follow it)
        self.awaiting_tokens: deque[DecodeInFlight] = deque()  # a split's earlier stages: decode steps launched
        # whose sampled tokens the last stage has not yet been heard from for (planned_decode)

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> StepResult:
        return self.finish(self.launch(plan))

    @torch.inference_mode()
    def launch(self, plan: StepPlan) -> LaunchedStep:
        """Run `plan` as far as this process can without the step's outcome: the whole step on one process or
        a split's last stage; the forward of its own layers elsewhere (finish reads the outcome). Under a
        split, steps are finished in the order they were launched."""
        stage = self.stage
        if stage is not None and stage.is_first:
            stage.share_plan(plan, self._finished_through)
        self._update_slots(plan)
        if plan.is_empty:
            return LaunchedStep(plan)
        inputs, hidden, expert_pairs, started = self._queue_forward(plan)  # hidden [T, D]
        step = LaunchedStep(plan, expert_pairs=expert_pairs, started=started, forward_done=time.perf_counter())
        # a dict of its own per forward (ForwardScratch.reset): later steps launched meanwhile leave it be
        step.window_states = inputs.ctx.scratch.window_states if self._has_windows(plan) else None
        if step.window_states and inputs.replayed and self._steps_between_launch_and_outcome:
            step.window_states = kept_apart(step.window_states)
        if stage is None or stage.is_last:
            prompt_logprobs = self.prompt_logprobs.compute(self.model, hidden, plan.scheduled, inputs.query_starts)
            step.spec = self.speculation.step(plan.scheduled, inputs.query_starts, inputs.input_ids, hidden,
                                              inputs.ctx, self.block_tables, step.window_states, inputs.logits)
            step.spec.prompt_logprobs = prompt_logprobs
            if stage is not None:
                stage.share_outcome(step.spec)
        return step

    def finish(self, step: LaunchedStep) -> StepResult:
        """A launched step's result; on a split's stages before the last, its outcome is read first and this
        stage's layers are rolled back to what the last stage accepted."""
        self._finished_through = step.plan.step_id
        if step.plan.is_empty:
            return StepResult(step.plan.step_id, [])
        spec = step.spec
        if spec is None:
            spec = self.stage.share_outcome()
            commit_outcomes(spec.outcomes, self.sampler, self.speculation.drafter, self.state_pool.caches,
                            step.window_states)
        return StepResult(step.plan.step_id, spec.slots, forward_seconds=step.forward_done - step.started,
                          sample_seconds=spec.verify_seconds, draft_seconds=spec.draft_seconds,
                          expert_pairs=step.expert_pairs, prompt_logprobs=spec.prompt_logprobs)

    @torch.inference_mode()
    def follow(self) -> None:
        """A split's stages 1..N-1: run the plans stage 0 shares, in its order, reading each step's outcome
        where stage 0 has read it, until it says stop."""
        in_flight: deque[LaunchedStep | DecodeInFlight] = deque()
        while True:
            plan, finished_through, decode_from = self.stage.next_plan()
            if isinstance(plan, session_rows.SessionRows):  # stage 0 reads or writes this stage's session rows
                reply = session_rows.serve(self, plan)
                if reply is not None:
                    self.stage.answer(reply)
                continue
            while in_flight and in_flight[0].plan.step_id <= finished_through:
                step = in_flight.popleft()
                if isinstance(step, DecodeInFlight):
                    self.complete_decode(step)
                else:
                    self.finish(step)
            if plan is None:
                return
            if decode_from is None:
                in_flight.append(self.launch(plan))
                continue
            # a decode step planned ahead (planned_decode), fed by the one in flight that stage 0 names
            inputs_from = None
            if decode_from >= 0:
                inputs_from = next(step for step in in_flight if step.plan.step_id == decode_from)
            in_flight.append(self.launch_decode(plan, inputs_from))

    def _queue_forward(self, plan: StepPlan, feed: torch.Tensor | None = None, shift: torch.Tensor | None = None
                       ) -> tuple[StepInputs, torch.Tensor, dict, float]:
        """The step's forward with the experts' per-step bookkeeping -> (inputs, hidden [T, D], expert
        pairs per slot, start time moved past any one-off graph capture)."""
        started = time.perf_counter()
        captured_before = self.graphs.capture_seconds if self.graphs is not None else 0.0
        if self.experts is not None:
            self.experts.begin_rows(plan.num_tokens)
        inputs, hidden = self._forward(plan, feed, shift)
        expert_pairs = {}
        if self.experts is not None:  # queued after the forward, so its host work overlaps the device's
            expert_pairs = self.experts.slot_pairs(plan.scheduled, inputs.query_starts)
            self.experts.end_step()  # routing statistics, finished expert copies, hot-set updates
        if self.graphs is not None:  # a one-off graph capture is not the step's cost
            started += self.graphs.capture_seconds - captured_before
        return inputs, hidden, expert_pairs, started

    def _forward(self, plan: StepPlan, feed: torch.Tensor | None = None, shift: torch.Tensor | None = None
                 ) -> tuple[StepInputs, torch.Tensor]:
        """Replay a CUDA graph when the step's layout has one (or can get one), else run eagerly.
        `feed` [R]: device token ids replacing the first R input ids. `shift` [S]: each slot's window moved by
        that many positions (a verification step planned ahead, see launch_verify)."""
        # graphs read the staging ring: a step whose host blocks do not fit it runs eagerly on the tier itself
        fits_ring = self.kv_staging is None or self.kv_staging.fits(plan.scheduled, self.host_kv.tables)
        if self.use_cuda_graphs and self.graphs is not None and fits_ring:
            key = self.graphs.layout_for(plan.scheduled)
            if key is not None:
                step = self.graphs.run(key, plan.scheduled, self.block_tables, feed, shift)
                if step is not None:
                    starts = [i * key[1] for i in range(len(plan.scheduled))]
                    return StepInputs(step.input_ids, step.ctx, starts, step.logits, key, replayed=True), step.hidden
            elif feed is None:
                split = graph_parts.forward_split(self, plan)
                if split is not None:
                    return split
        if shift is not None:  # eager: the true windows on the host (a wait on the device where it is not the host)
            plan = dataclasses.replace(plan, scheduled=[
                dataclasses.replace(w, num_computed_tokens=w.num_computed_tokens + d)
                for w, d in zip(plan.scheduled, shift.tolist())])
        host = self._host_tier(plan.scheduled)
        staged = self.kv_staging.begin(plan.scheduled, self.host_kv.tables) if host and self.kv_staging else None
        if staged is not None:  # the step reads its host blocks from the ring, copied layer by layer
            host = {"host_tables": staged, "host_kv_caches": self.kv_staging.view, "kv_staging": self.kv_staging}
        inputs = build_inputs(plan.scheduled, self.block_tables, self.block_size, self.kv_pool.caches,
                              self.state_pool.caches, self.device,
                              split_table_width=self.split_table_width,
                              keep_window_states=self._has_windows(plan), scratch=self.scratch,
                              arrays=self.table_arrays, **host)
        if feed is not None:
            inputs.input_ids[:feed.shape[0]].copy_(feed)
        if self.graphs is not None and self.experts is not None:  # graph steps left their padded count there
            self.experts.real_rows.fill_(inputs.input_ids.shape[0])
        if staged is not None:
            self.kv_staging.start()  # behind the inputs' uploads
        hidden = self.model(inputs.input_ids, inputs.ctx)
        if staged is not None:
            self.kv_staging.end()
        return inputs, hidden

    # ---- overlapped decoding: a step launched, the next planned and launched, then the first read ----

    @torch.inference_mode()
    def launch_decode(self, plan: StepPlan, inputs_from: DecodeInFlight | None = None) -> DecodeInFlight:
        return planned_decode.launch(self, plan, inputs_from)

    def complete_decode(self, step: DecodeInFlight) -> StepResult:
        return planned_decode.complete(self, step)

    # ---- verification steps planned ahead (runner/planned_verification.py) ------------------------------

    def verifies_ahead(self, plan: StepPlan) -> bool:
        return planned_verification.verifies_ahead(self, plan)

    @torch.inference_mode()
    def launch_verify(self, plan: StepPlan, inputs_from: VerifyInFlight | None = None) -> VerifyInFlight:
        return planned_verification.launch(self, plan, inputs_from)

    def complete_verify(self, step: VerifyInFlight) -> StepResult:
        return planned_verification.complete(self, step)

    def set_cuda_graphs(self, enabled: bool) -> None:
        """Replay CUDA graphs (where the runner built them) or run every step eagerly."""
        if enabled and self.graphs is None:
            raise ValueError("CUDA graphs are not available on this runner (CPU, --no-cuda-graphs or a "
                             "layer without a graph-safe path)")
        self.use_cuda_graphs = enabled

    def _mtp_context(self, scheduled: list, block_tables: dict[int, list[int]]):
        """The context of one MTP drafting pass (its own KV only, no recurrent state)."""
        return build_inputs(scheduled, block_tables, self.block_size, self.kv_pool.caches, {}, self.device,
                            split_table_width=self.split_table_width, arrays=self.table_arrays,
                            **self._host_tier(scheduled)).ctx

    def _host_tier(self, scheduled: list) -> dict:
        """build_inputs' host-tier arguments (none without --kv-resident-tokens) for an eager context of
        `scheduled`. Its torch paths read the host tier on the host: where some slot has host blocks, the
        offload copies still in flight land first."""
        if self.host_kv is None:
            return {}
        if self.host_kv.has_host_blocks(scheduled):
            self.host_kv.settle()
        return {"host_tables": self.host_kv.tables, "host_kv_caches": self.host_kv.caches}

    def _has_windows(self, plan: StepPlan) -> bool:
        """Whether the step verifies drafts on a model with recurrent state (which then records, and
        commit restores, the state after every window token)."""
        return bool(self.state_pool.caches) and any(w.draft_token_ids for w in plan.scheduled)

    def close(self) -> None:
        """Stage 0 of a pipeline split: stop the other stages (they leave their loop and the group)."""
        if self.stage is not None and self.stage.is_first:
            self.stage.close()

    def graph_stats(self) -> dict | None:
        if self.graphs is None:
            return None
        return {"enabled": self.use_cuda_graphs, "cached": len(self.graphs.graphs), "capacity": self.graphs.capacity,
                "captures": self.graphs.num_captures, "evictions": self.graphs.num_evictions,
                "replays": self.graphs.num_replays, "head_replays": self.graphs.num_head_replays,
                "verify_replays": self.graphs.verify.num_replays if self.graphs.verify is not None else 0,
                "part_steps": self.graph_part_steps, "mixed_steps": self.graph_mixed_steps,
                "pool_bytes": self.graphs.pool_bytes}

    def _update_slots(self, plan: StepPlan) -> None:
        # Order matters. Parks first: an evicted block or checkpoint row still holds what to park
        # (its new owner writes it later). Then saves: a slot freed or reassigned by this plan still
        # holds the state to save. Restores last, into blocks and slots that are now free to write.
        if self.host_park is not None:
            self.host_park.park_blocks(plan.park_blocks)
            self.host_park.park_checkpoints(plan.park_checkpoints)
        if self.host_kv is not None:
            if self.host_park is not None and plan.unpark_blocks:
                self.host_park.settle()  # the unparks read parked rows on the host
            self.host_kv.copy(plan, self.host_park.kv if self.host_park is not None else None)
        self.checkpoint_pool.save([slot for slot, _ in plan.checkpoint_saves], [row for _, row in plan.checkpoint_saves])
        for slot_id in plan.finished_slot_ids:
            self.block_tables.pop(slot_id, None)
            if self.host_kv is not None:
                self.host_kv.remove_slot(slot_id)
            self.sampler.remove_slot(slot_id)
            self.prompt_logprobs.remove_slot(slot_id)
            self.speculation.remove_slot(slot_id)
        for new in plan.new_slots:
            self.block_tables[new.slot_id] = list(new.cached_block_ids)
            if self.host_kv is not None:
                self.host_kv.add_slot(new, self.block_tables)
            self.sampler.add_slot(new.slot_id, new.sampling_params, new.prompt_token_ids, new.output_token_ids)
            self.prompt_logprobs.add_slot(new.slot_id, new.sampling_params, new.prompt_token_ids)
            self.speculation.add_slot(new.slot_id, new.prompt_token_ids + new.output_token_ids)

        for slot_id, num_blocks in plan.truncated_block_tables.items():
            del self.block_tables[slot_id][num_blocks:]
        for work in plan.scheduled:
            self.block_tables[work.slot_id].extend(work.new_block_ids)
            if self.host_kv is not None:
                self.host_kv.offloaded(work, self.block_tables)
        self._restore_from_caches(plan)

    def _restore_from_caches(self, plan: StepPlan) -> None:
        """Copy back what prefix hits need: parked KV blocks and saved recurrent states. If a copy
        fails, the slots that needed one are reported (RestoreFailed) before any forward reads them."""
        restored_blocks = {block for _, block in plan.restore_blocks}
        needing = [new.slot_id for new in plan.new_slots
                   if new.restore_checkpoint_row is not None or new.restore_checkpoint_host_row is not None
                   or restored_blocks & set(new.cached_block_ids)]
        try:
            if self.host_park is not None:
                self.host_park.restore_blocks(plan.restore_blocks)
            for new in plan.new_slots:
                if new.restore_checkpoint_row is not None:
                    self.checkpoint_pool.restore([new.restore_checkpoint_row], [new.slot_id])
                elif new.restore_checkpoint_host_row is not None:
                    self.host_park.restore_checkpoint(new.restore_checkpoint_host_row, new.slot_id)
        except Exception as e:
            logger.exception("restoring cached prefixes failed; the requests will recompute them")
            raise RestoreFailed(needing) from e


def kept_apart(window_states: dict) -> dict:
    """A graph replay's window states, copied out of the graph's memory, which its next replay overwrites (another
    batch group's step of the same layout): what a step's commit reads when other steps replay between its launch
    and its outcome (as an eager step's are its own tensors). Per layer: (conv [T, C, H], recurrent [T, ...]) ->
    the same, copied."""
    return {key: tuple(t.clone() for t in states) for key, states in window_states.items()}


def check_kv_dtype(kv_dtype: torch.dtype, device: str) -> None:
    """float8 KV on CUDA needs the float8 conversions of compute capability 8.9 (Ada, Hopper) or later
    (int8 KV runs on any)."""
    if kv_dtype.is_floating_point and kv_dtype.itemsize == 1 and str(device).startswith("cuda"):
        capability = torch.cuda.get_device_capability(torch.device(device))
        if capability < (8, 9):
            raise ValueError(f"fp8 KV needs a GPU of compute capability 8.9 or later (this one is "
                             f"{capability[0]}.{capability[1]}); use --kv-cache-dtype int8 or auto")


def graph_safe(model: nn.Module, dtype: torch.dtype) -> bool:
    """Whether every layer's CUDA path avoids host syncs and host-built tensors on decode windows: the
    Triton kernels cover attention and Gated DeltaNet in any dtype, the fused MoE kernel 16-bit weights
    only (float32 experts take the torch grouped path, which reads routing counts on the host)."""
    if not model.cuda_graph_safe:
        return False
    if not packed_experts_read_in_place(model):
        logger.warning("CUDA graphs off: some packed experts' block types or row lengths are not read by the "
                       "packed MoE kernels, and a graph would dequantize every expert of such a layer")
        return False
    return triton_available() and (dtype in (torch.bfloat16, torch.float16) or not model.config.num_experts)


def packed_experts_read_in_place(model: nn.Module) -> bool:
    """Whether the packed MoE kernels read every packed expert layer's blocks as they are (strata.kernels.
    packed_moe.pairs_supported). Otherwise that layer dequantizes its experts per step: the used ones when
    eager, every one inside a graph (~20 GiB per captured graph on Qwen4-Exp's shape, measured before the
    kernels read its 640-wide Q5_0 / Q8_0 down rows; now only a type no kernel reads, such as Q8_1)."""
    from strata.kernels.packed_moe import pairs_supported
    from strata.model.moe import PackedLocalExperts

    cfg = model.config
    return all(pairs_supported(m.qtype13, m.qtype2, cfg.hidden_size, cfg.moe_intermediate_size)
               for m in model.modules() if isinstance(m, PackedLocalExperts))
