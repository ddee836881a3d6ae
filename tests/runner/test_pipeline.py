"""Pipeline split (--pipeline-parallel-size): two CPU processes over gloo, each running half the layers, give
the greedy tokens of one process (HF transformers' tokens, checked elsewhere against the same engine) with
speculation (MTP and suffix), preemption, and prefix reuse; a hybrid model's recurrent states roll back on
both stages; the other stage stops when the engine closes; bad sizes are refused before anything starts."""

from __future__ import annotations

import pytest
import torch

from strata.config import CacheConfig, EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.engine.core import EngineCore
from strata.runner.pipeline import layer_ranges
from strata.types import Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def prompts(lengths) -> list[list[int]]:
    return [torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in lengths]


def run(folder: str, stages: int, spec: dict | None, batch: list[list[int]], num_blocks: int = 0):
    """Request i arrives at step i; -> (each request's tokens, the engine's cached prompt tokens, free blocks)."""
    config = EngineConfig(
        model=folder, runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=stages),
        scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=num_blocks), speculative=SpecConfig.from_json(spec))
    core = EngineCore(config, quiet=True)
    stage = core.runner.stage
    if stages > 1:  # this process keeps the caches of its own layers only
        owned = range(stage.first_layer, stage.end_layer)
        assert stage.end_layer < core.model_config.num_hidden_layers
        assert all(layer in owned for layer in [*core.runner.kv_pool.caches, *core.runner.state_pool.caches])
    try:
        outputs, cached, preempted, step = {i: [] for i in range(len(batch))}, 0, 0, 0
        while step == 0 or core.has_unfinished() or step <= len(batch):
            if step < len(batch):
                core.add_request(Request(str(step), batch[step], GREEDY))
            for delta in core.step():
                outputs[int(delta.request_id)] += delta.new_token_ids
                if delta.finished:
                    cached += delta.num_cached_tokens
                    preempted += delta.metrics["num_preemptions"]
            step += 1
        return ([outputs[i] for i in range(len(batch))], cached, core.scheduler.stats.num_draft_tokens, preempted,
                core.scheduler.allocator.num_free)
    finally:
        core.close()
        if stages > 1:
            for worker in stage.workers:
                assert not worker.is_alive()  # the other stage left when the engine closed


def test_layer_ranges_split_evenly_earlier_stages_first():
    assert layer_ranges(8, 2) == [(0, 4), (4, 8)]
    assert layer_ranges(5, 3) == [(0, 2), (2, 4), (4, 5)]
    assert layer_ranges(3, 1) == [(0, 3)]
    with pytest.raises(ValueError, match="between 1 and the model's 2 layers"):
        layer_ranges(2, 3)


@pytest.mark.parametrize("family, spec", [
    ("llama", None),
    ("llama", {"method": "suffix", "num_speculative_tokens": 3}),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3}),
], ids=["llama", "llama-suffix", "qwen3_next-mtp"])
def test_two_stages_give_one_process_tokens(family, spec, tiny_model_dir):
    """Four staggered requests, a shared prefix among them (the last repeats the first prompt and extends it)
    and too few KV blocks for all of them at once: preemptions, prefix hits, verification windows whose
    rejected tails roll the recurrent state back on each stage."""
    batch = prompts([23, 11, 40, 17])
    batch.append(batch[0] + [7, 8, 9])
    folder = tiny_model_dir(family)
    one, cached_one, drafted_one, preempted_one, free_one = run(folder, 1, spec, batch, num_blocks=40)
    two, cached_two, drafted_two, preempted_two, free_two = run(folder, 2, spec, batch, num_blocks=40)
    assert two == one
    assert preempted_two == preempted_one > 0
    assert cached_two == cached_one > 0            # the repeated prefix was reused, on both stages
    # (how many: the adaptive draft length follows measured step times, which two processes change)
    assert (drafted_two > 0) == (drafted_one > 0) == (spec is not None)
    assert free_two == free_one == 40


def test_a_split_is_refused_where_it_cannot_run(tiny_model_dir):
    config = EngineConfig(model=tiny_model_dir("llama"), runner=RunnerConfig(device="cpu", dtype="float32",
                                                                          pipeline_parallel_size=64))
    with pytest.raises(ValueError, match="pipeline_parallel_size must be between 1 and the model's"):
        EngineCore(config, quiet=True)
    with pytest.raises(ValueError, match="at least 1"):
        RunnerConfig(pipeline_parallel_size=0)
