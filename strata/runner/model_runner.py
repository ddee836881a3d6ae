"""The model runner: owns the model, the KV and recurrent-state pools, per-slot block tables and the
sampler; `execute(plan)` runs one forward for every scheduled slot and samples where a slot reached
the end of its known tokens.

Order inside a step matters: slots freed by the plan are released before new slots are set up,
because the scheduler may hand a freed slot id to a new request in the same plan.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from strata.cache.pools import KVPool, StatePool
from strata.runner.inputs import build_inputs
from strata.sample import Sampler
from strata.types import SlotResult, StepPlan, StepResult


class ModelRunner:
    def __init__(self, model: nn.Module, num_blocks: int, block_size: int, max_num_seqs: int,
                 device: str, seed: int = 0) -> None:
        cfg = model.config
        self.model = model
        self.device = device
        self.block_size = block_size
        dtype = next(model.parameters()).dtype
        kv_layers = cfg.full_attention_layers + ([cfg.num_hidden_layers] if model.has_mtp else [])
        self.kv_pool = KVPool(kv_layers, num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim,
                              dtype, device)
        self.state_pool = StatePool(model.recurrent_state_shapes(), max_num_seqs, dtype, device)
        self.sampler = Sampler(max_num_seqs, cfg.vocab_size, list(cfg.eos_token_ids), device, seed=seed)
        self.block_tables: dict[int, list[int]] = {}

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> StepResult:
        for slot_id in plan.finished_slot_ids:
            self.block_tables.pop(slot_id, None)
            self.sampler.remove_slot(slot_id)
        for new in plan.new_slots:
            self.block_tables[new.slot_id] = []
            self.sampler.add_slot(new.slot_id, new.sampling_params, new.prompt_token_ids, new.output_token_ids)
        if plan.is_empty:
            return StepResult(plan.step_id, [])
        for work in plan.scheduled:
            self.block_tables[work.slot_id].extend(work.new_block_ids)
        started = time.perf_counter()
        inputs = build_inputs(plan.scheduled, self.block_tables, self.block_size, self.kv_pool.caches,
                              self.state_pool.caches, self.device)
        hidden = self.model(inputs.input_ids, inputs.ctx)  # [T, D]
        if not inputs.sample_rows:
            return StepResult(plan.step_id, [], forward_seconds=time.perf_counter() - started)
        logits = self.model.compute_logits(hidden[inputs.sample_rows])  # [S, V]
        forward_done = time.perf_counter()
        out = self.sampler.sample(logits, inputs.sample_slot_ids)
        results = []
        for i, slot_id in enumerate(inputs.sample_slot_ids):
            self.sampler.append_output(slot_id, [out.token_ids[i]])
            logprobs = None if out.logprobs[i] is None else [out.logprobs[i]]
            results.append(SlotResult(slot_id, [out.token_ids[i]], logprobs=logprobs))
        return StepResult(plan.step_id, results, forward_seconds=forward_done - started,
                          sample_seconds=time.perf_counter() - forward_done)
