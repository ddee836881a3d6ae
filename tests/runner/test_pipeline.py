"""Pipeline split (--pipeline-parallel-size): two CPU processes over gloo, each running half the layers, give
the greedy tokens of one process (HF transformers' tokens, checked elsewhere against the same engine) with
speculation (MTP and suffix), preemption, and prefix reuse; a hybrid model's recurrent states roll back on
both stages; the other stage stops when the engine closes; bad sizes are refused before anything starts."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch

from strata.config import CacheConfig, EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.engine.core import EngineCore
from strata.runner.pipeline import layer_ranges
from strata.types import Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


@pytest.mark.parametrize("family", ["llama", "qwen3_next+mtp", "qwen4_exp+mtp"])
def test_the_last_stage_holds_the_head_and_its_own_layers(family, tiny_model_dir):
    """The last stage's process: its layers, the final norm, the LM head and the MTP head get weights; the
    earlier layers stay shapes on the meta device; the embedding only where the MTP head embeds its drafts or
    the LM head is tied to it."""
    from strata.weights.loader import build_model
    from strata.weights.source import open_source

    source = open_source(tiny_model_dir(family))
    cfg = source.model_config()
    first, end = layer_ranges(cfg.num_hidden_layers, 2)[1]
    model = build_model(source, "cpu", "float32", quiet=True, owned_layers=range(first, end))
    assert all(p.is_meta == (i < first) for i, layer in enumerate(model.model.layers) for p in layer.parameters())
    final = model.model.hyper_connection_mixer if family.startswith("qwen4_exp") else model.model.norm
    assert not (on_meta(final) or on_meta(model.lm_head))
    assert on_meta(model.model.embed_tokens) == (cfg.num_mtp_layers == 0 and not cfg.tie_word_embeddings)
    assert cfg.num_mtp_layers == 0 or not on_meta(model.mtp)


def on_meta(module: torch.nn.Module) -> bool:
    """Whether a module is shapes only: none of its tensors holds memory (parameters, and buffers: a packed GGUF
    weight keeps its blocks in buffers)."""
    tensors = [*module.parameters(), *module.buffers()]
    return bool(tensors) and all(t.is_meta for t in tensors)


def prompts(lengths) -> list[list[int]]:
    return [torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in lengths]


def run(folder: str, stages: int, spec: dict | None, batch: list[list[int]], num_blocks: int = 0, groups: int = 1,
        device: str = "cpu", dtype: str = "float32", experts: dict | None = None, graphs: bool = False):
    """Request i arrives at step i; -> (each request's tokens, the engine's cached prompt tokens, free blocks).
    `experts`: ExpertConfig fields (where the routed experts live)."""
    config = EngineConfig(
        model=folder, runner=RunnerConfig(device=device, dtype=dtype, pipeline_parallel_size=stages,
                                          batch_groups=groups, cuda_graphs=graphs),
        scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=num_blocks, conversation_cache_mib=4),
        speculative=SpecConfig.from_json(spec), experts=ExpertConfig(**(experts or {})))
    core = EngineCore(config, quiet=True)
    stage = core.runner.stage
    run.ahead = count_ahead(core)
    if stages > 1:  # this process keeps the caches of its own layers only
        owned = range(stage.first_layer, stage.end_layer)
        assert stage.end_layer < core.model_config.num_hidden_layers
        # (cache keys name a layer, or a layer's extra: Qwen4-Exp's ("ple", i), ("index", i))
        keys = [*core.runner.kv_pool.caches, *core.runner.state_pool.caches]
        assert all((key[1] if isinstance(key, tuple) else key) in owned for key in keys)
        model = core.loaded.model
        layers = model.model.layers  # and the weights of its own layers only
        assert all(on_meta(layer) == (i not in owned) for i, layer in enumerate(layers))
        # the first stage embeds; the final norm (Qwen4-Exp: stream mixer), LM head (but a tied one, the embedding)
        # and MTP head are the last's
        final = getattr(model.model, "hyper_connection_mixer", None) or model.model.norm
        assert not on_meta(model.model.embed_tokens) and on_meta(final)
        assert on_meta(model.lm_head) != core.model_config.tie_word_embeddings
        assert getattr(model, "mtp", None) is None or on_meta(model.mtp)
    try:
        outputs, cached, preempted, step = {i: [] for i in range(len(batch))}, 0, 0, 0
        run.overlapped = 0  # steps after which another step was still in flight (batch groups)
        while step == 0 or core.has_unfinished() or step <= len(batch):
            if step < len(batch):
                core.add_request(Request(str(step), batch[step], GREEDY))
            for delta in core.step():
                outputs[int(delta.request_id)] += delta.new_token_ids
                if delta.finished:
                    cached += delta.num_cached_tokens
                    preempted += delta.metrics["num_preemptions"]
            run.overlapped += bool(core._groups)
            step += 1
        run.replays = core.runner.graphs.num_replays if core.runner.graphs is not None else 0  # (this process's)
        run.part_steps = core.runner.graph_part_steps  # steps of prompts beside others replayed as graph parts
        if stages > 1:  # gloo sends (a plan and activations a step), complete only once waited on, do not pile up
            assert len(stage._sends) <= 64
        return ([outputs[i] for i in range(len(batch))], cached, core.scheduler.stats.num_draft_tokens, preempted,
                core.scheduler.allocator.num_free, core.scheduler.cache_stats.as_dict())
    finally:
        core.close()
        if stages > 1:
            for worker in stage.workers:
                assert worker.poll() == 0  # the other stage left when the engine closed


def count_ahead(core: EngineCore, sizes: list | None = None) -> list[bool]:
    """Records, per decode step stage 0 launches planned ahead (--async-scheduling), whether its inputs came from
    a step still in flight; and into `sizes` the slot count of every step launched."""
    ahead, runner = [], core.runner
    launch_decode, launch = runner.launch_decode, runner.launch

    def counted_decode(plan, inputs_from=None):
        ahead.append(inputs_from is not None)
        if sizes is not None:
            sizes.append(len(plan.scheduled))
        return launch_decode(plan, inputs_from)

    def counted(plan):
        if sizes is not None and plan.scheduled:
            sizes.append(len(plan.scheduled))
        return launch(plan)

    runner.launch_decode, runner.launch = counted_decode, counted
    return ahead


def test_a_step_failing_on_a_stage_stops_the_split_and_closes_it(tiny_model_dir, monkeypatch):
    """Stage 0 fails in the middle of a step (after its layers, before it passes their activations on), so stage 1
    waits inside that step for good: the engine says so (SplitBroken, naming the step and the error) rather than
    serve from stages out of step, and closing it does not wait for the stuck stage: its process is stopped."""
    from strata.runner.pipeline import SplitBroken, Stage

    calls = []

    def pass_on_then_fail(self, *activations):
        calls.append(len(calls))
        if len(calls) == 3:
            raise RuntimeError("injected failure")
        return original(self, *activations)

    original = Stage.pass_on
    monkeypatch.setattr(Stage, "pass_on", pass_on_then_fail)
    config = EngineConfig(
        model=tiny_model_dir("llama"), runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=2),
        scheduler=SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=40))
    core = EngineCore(config, quiet=True)
    workers = core.runner.stage.workers
    try:
        core.add_request(Request("0", prompts([12])[0], GREEDY))
        failed = r"step \d+ failed on pipeline stage 0 \(RuntimeError: injected failure\)"
        with pytest.raises(SplitBroken, match=failed):
            for _ in range(10):
                core.step()
    finally:
        started = time.monotonic()
        core.close()
    assert time.monotonic() - started < 15
    assert all(worker.poll() is not None for worker in workers)


def test_a_split_that_fails_to_build_leaves_nothing_behind(tiny_model_dir, monkeypatch):
    """Stage 0 fails to load after the stages joined their group: the error comes out, the other stage is stopped
    and this process leaves the group, so the next split engine in it starts (before, it found the group still
    initialized)."""
    import strata.engine.build as build

    def fail(*args, **kwargs):
        raise RuntimeError("injected load failure")

    folder = tiny_model_dir("llama")
    monkeypatch.setattr(build, "build_model", fail)
    config = EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=2))
    with pytest.raises(RuntimeError, match="injected load failure"):
        EngineCore(config, quiet=True)
    assert not torch.distributed.is_initialized()
    monkeypatch.undo()
    batch = prompts([9, 5])
    assert run(folder, 2, None, batch, num_blocks=40)[0] == run(folder, 1, None, batch, num_blocks=40)[0]


def test_a_stage_without_the_ple_layer_moves_no_ple_table(tiny_model_dir):
    """Qwen4-Exp's PLE table lives with its layer's stage; another stage holds it as shapes only, and placing
    host tables on a GPU leaves it be (it tried to copy the meta table, and the stage died while loading)."""
    from strata.weights.loader import build_model, place_host_tables
    from strata.weights.source import open_source

    source = open_source(tiny_model_dir("qwen4_exp"))
    cfg = source.model_config()
    first, end = layer_ranges(cfg.num_hidden_layers, 2)[1]
    assert cfg.ple_layers and not any(first <= i < end for i in cfg.ple_layers)
    model = build_model(source, "cpu", "float32", quiet=True, owned_layers=range(first, end))
    tables = [m for m in model.modules() if getattr(m, "host_resident", False)]
    assert tables and all(on_meta(m) for m in tables)
    place_host_tables(model, "cuda:0", quiet=True)  # nothing to move (no CUDA needed)


def _leave(stage, out: str, rank: int, result) -> None:
    """A stage process of the message tests: its sends delivered, `result` written to out.RANK, the group left."""
    for work, _ in stage._sends:
        work.wait()
    torch.distributed.barrier()
    with open(f"{out}.{rank}", "w") as f:
        f.write(repr(result))
    torch.distributed.destroy_process_group()
    os._exit(0)


def _graph_parts_in_stage(rank: int, port: int, out: str) -> None:
    from strata.runner.pipeline import Stage, graph_row_runs, join_group

    join_group(rank, 3, port, "cpu")
    stage = Stage(rank, 3, rank, rank + 1, 3, graph_rows=8)
    # a step of 7 rows in plan order: a window of 2 (rows 0-1), then fresh prompts of 3 and 2 (rows 2-4, 5-6)
    rows = torch.arange(2 * 7 * 4, dtype=torch.float32).view(2, 7, 4)
    result = None
    if rank == 0:  # eager: one message of the step's rows
        stage.pass_on(*rows)
    elif rank == 1:  # two graph parts: the window's layout (1 x 2), the prompts' (2 x 4, each padded to 4 rows)
        with stage.capturing_layers():
            hidden, residual = stage.take_over(2, 8, 4, torch.float32, "cpu")
            outputs = [hidden * 2, residual + 1]
            stage.pass_on(*outputs)
        received = stage.step_activations(7)                         # one message for both parts
        into = [torch.full((7, 4), -1.0), torch.full((7, 4), -1.0)]  # the step's activations out, in plan order
        for plan_starts, lengths, n in (([0], [2], 2), ([2, 5], [3, 2], 4)):
            runs = graph_row_runs(plan_starts, lengths, n)
            hidden.fill_(7)
            stage.receive_for_graph(runs, len(lengths) * n, received)
            if n == 4:  # each prompt's padding rows zeroed, nothing left over from the last part
                assert hidden[3].eq(0).all() and hidden[6:8].eq(0).all() and hidden[:3].eq(rows[0][2:5]).all()
            torch.mul(hidden, 2, out=outputs[0]), torch.add(residual, 1, out=outputs[1])  # the replay
            stage.send_from_graph(stage.graph_outputs, runs, into)
        stage.pass_on(*into)                                          # one message after the last part
    else:
        result = [t.tolist() for t in stage.take_over(2, 7, 4, torch.float32, "cpu")]
    _leave(stage, out, rank, result)


def test_a_stage_replaying_a_step_as_graph_parts_sends_and_receives_it_once(tmp_path):
    """A step of verification windows beside fresh prompts, which the middle of three stages replays as two graph
    parts (the windows' layout, then the prompts' with padding rows after each prompt): it receives the step's rows
    in one message and sends them in one, in plan order, as the eager stages around it do."""
    import torch.multiprocessing as mp

    from strata.runner.pipeline import free_port

    out = str(tmp_path / "rows")
    mp.spawn(_graph_parts_in_stage, args=(free_port(), out), nprocs=3)
    rows = torch.arange(2 * 7 * 4, dtype=torch.float32).view(2, 7, 4)
    assert open(f"{out}.2").read() == repr([(rows[0] * 2).tolist(), (rows[1] + 1).tolist()])


def test_graph_row_runs_merge_what_is_contiguous():
    from strata.runner.pipeline import graph_row_runs

    assert graph_row_runs([0, 1, 2, 3], [1, 1, 1, 1], 1) == [(0, 0, 4)]          # decode
    assert graph_row_runs([0, 4], [4, 4], 4) == [(0, 0, 8)]                      # windows of 4
    assert graph_row_runs([2, 5], [3, 2], 4) == [(2, 0, 3), (5, 4, 2)]           # prompts padded to 4 rows
    assert graph_row_runs([0, 9], [4, 4], 4) == [(0, 0, 4), (9, 4, 4)]           # a part's slots apart in the step


def test_layer_ranges_split_evenly_earlier_stages_first():
    assert layer_ranges(8, 2) == [(0, 4), (4, 8)]
    assert layer_ranges(5, 3) == [(0, 2), (2, 4), (4, 5)]
    assert layer_ranges(3, 1) == [(0, 3)]
    with pytest.raises(ValueError, match="between 1 and the model's 2 layers"):
        layer_ranges(2, 3)


@pytest.mark.parametrize("family, spec", [
    ("llama", None),
    ("llama", {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}),
    ("qwen3_5_moe+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}),
    ("qwen4_exp+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}),
], ids=["llama", "llama-suffix", "qwen3_next-mtp", "qwen3_5_moe-mtp", "qwen4_exp-mtp"])
def test_two_stages_give_one_process_tokens(family, spec, tiny_model_dir):
    """Four staggered requests, a shared prefix among them (the last repeats the first prompt and extends it),
    too few KV blocks for all of them at once and a conversation cache in host RAM: preemptions, parked and
    restored blocks, prefix hits, a hybrid's checkpoints, verification windows whose rejected tails roll the
    recurrent state back on each stage."""
    batch = prompts([23, 11, 40, 17])
    batch.append(batch[0] + [7, 8, 9])
    folder = tiny_model_dir(family)
    one, cached_one, drafted_one, preempted_one, free_one, cache_one = run(folder, 1, spec, batch, num_blocks=40)
    two, cached_two, drafted_two, preempted_two, free_two, cache_two = run(folder, 2, spec, batch, num_blocks=40)
    assert two == one
    # evicted blocks parked in host RAM and copied back (and a hybrid's checkpoints), on both stages alike
    assert cache_two == cache_one and cache_one["blocks_restored"] > 0
    assert (cache_one["checkpoints_saved"] > 0) == family.startswith(("qwen3_next", "qwen3_5", "qwen4_exp"))
    assert preempted_two == preempted_one > 0
    assert cached_two == cached_one > 0            # the repeated prefix was reused, on both stages
    # fixed draft lengths (adaptive ones follow measured step times): the same steps, split or not
    assert drafted_two == drafted_one and (drafted_one > 0) == (spec is not None)
    assert free_two == free_one == 40
    if spec is None:  # decode steps planned and launched before the one they follow was read, fed its tokens
        assert sum(run.ahead) > 10


@pytest.mark.parametrize("family, spec", [
    ("llama", None),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}),
    ("qwen3_next+mtp", {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}),
    ("qwen4_exp+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}),
], ids=["llama", "qwen3_next-mtp", "qwen3_next-suffix", "qwen4_exp-mtp"])
def test_batch_groups_in_flight_give_one_process_tokens(family, spec, tiny_model_dir):
    """Two groups of slots in flight at once over two stages (stage 0 runs one group's step while the last
    stage runs the other's): each request's greedy tokens are still the one-process ones, with preemption
    (never of a request in flight), prefix reuse, a hybrid's checkpoints and verification windows."""
    batch = prompts([23, 11, 40, 17, 9, 30])
    batch.append(batch[0] + [7, 8, 9])
    folder = tiny_model_dir(family)
    one = run(folder, 1, spec, batch, num_blocks=40)
    grouped = run(folder, 2, spec, batch, num_blocks=40, groups=2)
    assert run.overlapped > 10  # most steps finished with the other group's still running
    if spec is None:  # and a group's decode step was followed by its next one before it was read
        assert sum(run.ahead) > 10
    assert grouped[0] == one[0]
    assert grouped[1] > 0 and grouped[3] > 0  # prefix reused; preempted for blocks
    assert grouped[4] == 40  # every block back


def test_two_stages_with_offloaded_experts_give_one_process_tokens(tiny_model_dir):
    """Half of each MoE layer's experts in device slots, the rest computed by the CPU pool, the hot set swapped
    every 2 steps: each stage keeps the slots and learns the hot set of its own layers; the tokens are one
    process's, with batch groups in flight."""
    experts = {"expert_cache": "50%", "expert_swap_interval": 2}
    batch = prompts([23, 11, 40, 17])
    folder = tiny_model_dir("qwen3_moe")
    one = run(folder, 1, None, batch, num_blocks=40, experts=experts)
    two = run(folder, 2, None, batch, num_blocks=40, groups=2, experts=experts)
    assert two[0] == one[0] and two[4] == 40


def test_a_routing_profile_under_a_split_holds_every_moe_layer(tiny_model_dir, tmp_path):
    """--expert-profile with two stages: each stage saves its own MoE layers' rows into the one file (the model's
    shape, so one process loads it too), and a split started from it reads each stage's rows."""
    from strata.experts.profile import load_profile

    path = str(tmp_path / "profile.json")
    folder = tiny_model_dir("qwen3_moe")  # 4 layers, the second dense: MoE layer 0 on stage 0, 1 and 2 on stage 1
    config = EngineConfig(
        model=folder, runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=2),
        scheduler=SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=40),
        experts=ExpertConfig(expert_cache="50%", expert_profile=path))
    for started_from_profile in (False, True):
        core = EngineCore(config, quiet=True)
        experts = core.loaded.experts
        assert (experts.layer_ids, experts.num_model_layers) == ([0], 3)
        assert (experts.profile_counts is not None) == started_from_profile
        try:
            core.add_request(Request("0", prompts([12])[0], GREEDY))
            while core.has_unfinished():
                core.step()
            experts.close()  # what the server's engine process does at shutdown: stage 0's rows
        finally:
            core.close()  # the other stage saves its rows as it leaves
        counts = load_profile(path, 3, 8)  # every row routed to: (12 prompt + 23 decoded tokens) x top-2 each
        assert counts.sum(1).tolist() == [70 * (1 + started_from_profile)] * 3


def test_seeded_sampled_requests_over_a_split_with_drafts_give_one_process_tokens_without(tiny_model_dir):
    """Seeded sampled requests with suffix drafts of adaptive length over two stages: one process's tokens without
    speculation, since a seeded window draws each position's token as plain decoding does there (session 44 found
    split and one process differing when a window's draws depended on its drafts, which adaptive lengths make
    differ)."""
    from strata import LLM

    folder = tiny_model_dir("llama")
    inputs = [{"prompt_token_ids": p * 3} for p in prompts([7, 5, 9, 6])]  # repeats: suffix drafts find matches
    params = [SamplingParams(temperature=0.3, top_p=0.95, seed=s, max_tokens=20, ignore_eos=True) for s in range(4)]

    def generate(stages: int, spec: dict | None):
        with LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4, pipeline_parallel_size=stages,
                 speculative_config=spec) as llm:
            tokens = [o.outputs[0].token_ids for o in llm.generate(inputs, params)]
            return tokens, llm.engine.scheduler.stats

    plain, _ = generate(1, None)
    two, stats = generate(2, {"method": "suffix", "num_speculative_tokens": 3})
    assert two == plain and 0 < stats.num_accepted_tokens < stats.num_draft_tokens


def test_prompt_logprobs_come_back_from_the_last_stage(tiny_model_dir):
    """The last stage computes prompt logprobs (it holds the LM head) and they reach stage 0 with the step's
    outcome: a chunked prompt's over two stages equal one process's."""
    from strata import LLM

    prompt = prompts([19])[0]
    params = SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=2)

    def generate(stages: int):
        with LLM(tiny_model_dir("qwen3_next"), dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
                 max_num_batched_tokens=8, pipeline_parallel_size=stages) as llm:
            out = llm.generate({"prompt_token_ids": prompt}, params)[0]
            return [None if e is None else {t: lp.logprob for t, lp in e.items()} for e in out.prompt_logprobs]

    one, two = generate(1), generate(2)
    assert len(one) == len(prompt) and one[0] is None and all(one[1:])
    assert [list(e or ()) for e in two] == [list(e or ()) for e in one]
    assert all(two[i][t] == pytest.approx(one[i][t], abs=1e-5) for i in range(1, len(prompt)) for t in one[i])


def test_the_sampling_stage_enforces_grammars_and_reasoning_budgets(tmp_path):
    """The last stage samples, so its sampler gets what the tokenizer gives (grammar matchers, the thinking
    tokens): a regex and a seeded sampled choice, and reasoning budgets that end the thinking after exactly their
    token counts, give one process's tokens over two stages."""
    from thinking_model import save_thinking_model

    from strata import LLM
    from strata.types import StructuredOutputs

    folder = save_thinking_model(str(tmp_path / "thinking"))

    def generate(stages: int):
        with LLM(folder, dtype="float32", device="cpu", max_num_seqs=4, block_size=4,
                 pipeline_parallel_size=stages) as llm:
            prompts = [{"prompt_token_ids": llm.encode_chat([{"role": "user", "content": f"question {i}"}])}
                       for i in range(4)]
            params = [SamplingParams(temperature=0.0, max_tokens=24, thinking_budget=3),
                      SamplingParams(temperature=0.0, max_tokens=24, thinking_budget=9),
                      SamplingParams(temperature=0.0, max_tokens=24,
                                     structured_outputs=StructuredOutputs(regex=r"[0-9]{3}-[a-z]{4}")),
                      SamplingParams(temperature=0.9, seed=4, max_tokens=24,
                                     structured_outputs=StructuredOutputs(choice=["yes", "no", "maybe"]))]
            outputs = [o.outputs[0] for o in llm.generate(prompts, params)]
            return [o.token_ids for o in outputs], [o.text for o in outputs], llm.tokenizer

    one, texts, tokenizer = generate(1)
    two, texts_two, _ = generate(2)
    assert two == one
    end = tokenizer.convert_tokens_to_ids("</think>")
    assert one[0][3] == end and one[1][9] == end
    assert re.fullmatch(r"[0-9]{3}-[a-z]{4}", texts[2]) and texts[3] in ("yes", "no", "maybe")


def _session_engine(folder: str, stages: int) -> EngineCore:
    return EngineCore(EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32",
                                                                     pipeline_parallel_size=stages),
                                   cache=CacheConfig(block_size=4)), quiet=True)


def _turn(engine: EngineCore, jobs, request: Request | None = None, job: tuple | None = None) -> tuple[list, int, list]:
    """One request and/or one session job, driven as the engine loop drives them -> (the request's tokens, its
    cached prompt tokens, the session replies)."""
    if request is not None:
        engine.add_request(request)
    if job is not None:
        jobs.submit(*job)
    tokens, cached, replies = [], 0, []
    while engine.has_unfinished() or jobs.busy:
        deltas, done = jobs.run() if jobs.busy else ([], [])
        replies += done
        if engine.has_unfinished():
            deltas += engine.step()
        for delta in deltas:
            tokens += delta.new_token_ids
            cached = delta.num_cached_tokens if delta.finished else cached
    return tokens, cached, replies


@pytest.mark.parametrize("family", ["llama", "qwen4_exp"])  # qwen4_exp: the first stage holds no KV, only states
def test_session_files_move_between_a_split_and_one_process(family, tiny_model_dir, tmp_path):
    """A conversation saved by a split engine (each stage's KV blocks and recurrent states, gathered by stage 0)
    restores into one process, and one saved there restores into a split: the next turn reads its prefix from the
    cache and gives the tokens of an engine that never stopped."""
    from strata.engine.session_jobs import SessionJobs

    folder = tiny_model_dir(family)
    prompt = prompts([37])[0]
    for saver, restorer in ((2, 1), (1, 2)):
        path = str(tmp_path / f"conversation-{saver}-{restorer}")
        engine = _session_engine(folder, saver)
        try:
            jobs = SessionJobs(engine)
            conversation = prompt + _turn(engine, jobs, Request("first", prompt, GREEDY))[0]
            saved = _turn(engine, jobs, job=(1, "save", {"path": path, "token_ids": conversation}))[2]
            assert saved[0][1]["ok"], saved
            next_turn = conversation + [7, 8, 9, 10, 11]
            expected = _turn(engine, jobs, Request("never-stopped", next_turn, GREEDY))[0]
        finally:
            engine.close()
        fresh = _session_engine(folder, restorer)
        try:
            jobs = SessionJobs(fresh)
            restored = _turn(fresh, jobs, job=(2, "restore", {"path": path}))[2]
            assert restored[0][1]["ok"] and restored[0][1]["num_tokens"] == saved[0][1]["num_tokens"], restored
            tokens, cached, _ = _turn(fresh, jobs, Request("after-restart", next_turn, GREEDY))
        finally:
            fresh.close()
        assert tokens == expected and cached == saved[0][1]["num_tokens"]


def test_a_request_ended_while_its_group_runs_frees_its_slot_after_the_step(tiny_model_dir):
    """An abort lands while the request's step is in flight: its slot is not handed out until that step is
    finished (a new request would otherwise get the old one's outcome), and the other requests go on."""
    folder = tiny_model_dir("llama")
    config = EngineConfig(
        model=folder, runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=2, batch_groups=2),
        scheduler=SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=40))
    core = EngineCore(config, quiet=True)
    try:
        batch = prompts([12, 14, 16])
        for i, ids in enumerate(batch[:2]):
            core.add_request(Request(str(i), ids, GREEDY))
        outputs = {str(i): [] for i in range(3)}
        for delta in core.step():
            outputs[delta.request_id] += delta.new_token_ids
        assert core._groups and core.scheduler.in_flight  # one group's step still runs
        victim = str(int(core._groups[0][0].scheduled[0].slot_id != core.scheduler.requests["0"].slot_id))
        slot = core.scheduler.requests[victim].slot_id
        core.abort_request(victim)
        assert slot not in core.scheduler.free_slots  # held until its step is finished
        core.add_request(Request("2", batch[2], GREEDY))
        while core.has_unfinished():
            for delta in core.step():
                outputs[delta.request_id] += delta.new_token_ids
        alone = run(folder, 1, None, [batch[int(i)] for i in ("0", "1", "2") if i != victim], num_blocks=40)[0]
        assert [outputs[i] for i in ("0", "1", "2") if i != victim] == alone
        assert core.scheduler.allocator.num_free == 40 and not core.scheduler.in_flight
    finally:
        core.close()


def test_batch_groups_share_the_running_requests_evenly(tiny_model_dir):
    """A server's max_num_seqs is far above its load: four requests with room for eight make two groups of two
    (not one of four and an idle one), each group's decode steps planned ahead of the one they follow; one
    process's tokens, nothing left in flight."""
    folder = tiny_model_dir("llama")
    batch = prompts([12, 14, 16, 18])
    config = EngineConfig(
        model=folder, runner=RunnerConfig(device="cpu", dtype="float32", pipeline_parallel_size=2, batch_groups=2),
        scheduler=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=128),
        cache=CacheConfig(block_size=4, num_gpu_blocks=40))
    core = EngineCore(config, quiet=True)
    sizes, outputs = [], {str(i): [] for i in range(len(batch))}
    ahead = count_ahead(core, sizes)
    try:
        for i, ids in enumerate(batch):
            core.add_request(Request(str(i), ids, GREEDY))
        both_busy = 0
        while core.has_unfinished():
            for delta in core.step():
                outputs[delta.request_id] += delta.new_token_ids
            both_busy += len(core._groups) == 2
        assert max(sizes) == 2 and sizes.count(2) > 20
        assert both_busy > 10 and sum(ahead) > 10
        assert core.scheduler.allocator.num_free == 40 and not core.scheduler.in_flight
    finally:
        core.close()
    assert [outputs[str(i)] for i in range(len(batch))] == run(folder, 1, None, batch, num_blocks=40)[0]


@pytest.fixture(scope="module")
def packed_gguf(tmp_path_factory) -> str:
    """A Q4_K_M file of a 4-layer random SmolLM2 shape (its 576-wide rows fall back to Q5_0 / Q8_0 blocks):
    every weight stays packed."""
    from strata.weights.gguf_export import export_gguf

    path = str(tmp_path_factory.mktemp("packed") / "smollm2-4l-q4_k_m.gguf")
    export_gguf("random:smollm2-135m?num_hidden_layers=4", path, "q4_k_m")
    return path


def test_two_stages_on_packed_weights_give_one_process_tokens(packed_gguf):
    """A GGUF whose blocks stay packed, split by layer: each stage loads its own layers' blocks."""
    batch = prompts([23, 11, 40])
    assert run(packed_gguf, 2, None, batch, num_blocks=40, groups=2)[0] == run(packed_gguf, 1, None, batch,
                                                                               num_blocks=40)[0]


QWEN4EXP = ("random:qwen4exp-125b?num_hidden_layers=4&hidden_size=256&moe_intermediate_size=256"
            "&shared_expert_intermediate_size=256&num_experts=4&num_experts_per_tok=2&vocab_size=512"
            "&num_attention_heads=2&num_key_value_heads=1&head_dim=128&linear_num_key_heads=2"
            "&linear_num_value_heads=4&linear_key_head_dim=64&linear_value_head_dim=64&max_position_embeddings=256"
            "&hc_lowrank=32&indexer_head_dim=128&indexer_budget=8&ngram_vocab_size_base=300")


def test_two_stages_of_a_packed_qwen4_exp_file_give_one_process_tokens(tmp_path):
    """The seed's model from its GGUF at Q4_K_M, split by layer: the PLE layer (its n-gram table read from the
    file's blocks) on the first stage, QSA past its 8-token budget, the stream mixer (`output_hc_*`) and the MTP
    head (`nextn`) on the last; the residual streams cross between them. MTP drafts, batch groups in flight."""
    from strata.weights.gguf_export import export_gguf

    path = str(tmp_path / "qwen4exp-q4_k_m.gguf")
    export_gguf(QWEN4EXP, path, "q4_k_m", seed=3)
    spec = {"method": "mtp", "num_speculative_tokens": 2, "adaptive": False}
    batch = prompts([23, 11, 30])
    one = run(path, 1, spec, batch, num_blocks=40)
    two = run(path, 2, spec, batch, num_blocks=40, groups=2)
    assert two[0] == one[0] and one[2] > 0 and two[4] == 40


@pytest.mark.gpu
@pytest.mark.parametrize("family, spec, dtype, groups", [
    ("llama", None, "float32", 2),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, "float32", 2),
    ("packed", None, "bfloat16", 1),
    ("packed", {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}, "bfloat16", 2),
    ("qwen4_exp+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, "float32", 2),
], ids=["llama", "qwen3_next-mtp", "packed-q4_k_m", "packed-q4_k_m-suffix-groups", "qwen4_exp-mtp"])
def test_two_stages_sharing_one_gpu_give_one_process_tokens(family, spec, dtype, groups, tiny_model_dir, request,
                                                            monkeypatch):
    """The split on one card (STRATA_PIPELINE_SHARE_GPUS: two processes on cuda:0, activations through host
    memory over gloo), eager like a split: the one-process tokens, on float weights and on packed GGUF blocks
    (bf16 activations), with batch groups in flight."""
    monkeypatch.setenv("STRATA_PIPELINE_SHARE_GPUS", "1")
    folder = request.getfixturevalue("packed_gguf") if family == "packed" else tiny_model_dir(family)
    batch = prompts([23, 11, 40, 17])
    batch.append(batch[0] + [7, 8, 9])
    one = run(folder, 1, spec, batch, num_blocks=40, device="cuda", dtype=dtype)
    two = run(folder, 2, spec, batch, num_blocks=40, groups=groups, device="cuda", dtype=dtype)
    assert two[0] == one[0] and two[4] == 40
    if groups == 1:
        assert two[1:] == one[1:]


@pytest.mark.gpu
@pytest.mark.parametrize("family, spec, groups", [
    ("llama", None, 2),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, 1),
    ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, 2),
    ("qwen4_exp+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, 1),
    ("qwen4_exp+mtp", {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False}, 2),
    ("packed", {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False}, 2),
], ids=["llama-groups", "qwen3_next-mtp", "qwen3_next-mtp-groups", "qwen4_exp-mtp", "qwen4_exp-mtp-groups",
        "packed-q4_k_m-suffix-groups"])
def test_two_stages_replaying_cuda_graphs_give_one_process_tokens(family, spec, groups, tiny_model_dir, request,
                                                                  monkeypatch):
    """Each stage captures graphs of its own layers (bf16) and the activations cross around every replay: the
    tokens of one process with graphs, decode and verification windows replayed on the stages, and steps that
    bring fresh prompts beside them as several graph parts (one message each way for the whole step). With two batch
    groups (whose batches, and so bf16 rounding, are not one process's): the tokens of the same split run eagerly,
    while the other group's replays run between a step's launch and its outcome on the first stage."""
    monkeypatch.setenv("STRATA_PIPELINE_SHARE_GPUS", "1")
    folder = request.getfixturevalue("packed_gguf") if family == "packed" else tiny_model_dir(family)
    batch = prompts([23, 11, 40, 17])
    batch.append(batch[0] + [7, 8, 9])
    two = run(folder, 2, spec, batch, num_blocks=40, groups=groups, device="cuda", dtype="bfloat16", graphs=True)
    assert run.replays > 0 and run.part_steps > 0 and two[4] == 40  # (prompts arrive beside running requests)
    if groups == 1:
        assert two[0] == run(folder, 1, spec, batch, num_blocks=40, device="cuda", dtype="bfloat16", graphs=True)[0]
    else:
        assert run.overlapped > 0
        assert two[0] == run(folder, 2, spec, batch, num_blocks=40, groups=groups, device="cuda", dtype="bfloat16")[0]


def test_a_split_is_refused_where_it_cannot_run(tiny_model_dir):
    config = EngineConfig(model=tiny_model_dir("llama"), runner=RunnerConfig(device="cpu", dtype="float32",
                                                                          pipeline_parallel_size=64))
    with pytest.raises(ValueError, match="pipeline_parallel_size must be between 1 and the model's"):
        EngineCore(config, quiet=True)
    with pytest.raises(ValueError, match="at least 1"):
        RunnerConfig(pipeline_parallel_size=0)
    with pytest.raises(ValueError, match="batch_groups above 1 needs a pipeline split"):
        RunnerConfig(batch_groups=2)


def test_random_weights_are_the_whole_models_on_each_stage():
    """A random shape draws every tensor in one sequence: each stage draws (and drops) the others' layers too,
    so its own layers get the single process's weights."""
    folder = "random:smollm2-135m?num_hidden_layers=4"
    batch = prompts([9, 5])
    assert run(folder, 2, None, batch, num_blocks=64)[0] == run(folder, 1, None, batch, num_blocks=64)[0]


def _agree_in_stage(rank: int, port: int, out: str) -> None:
    from strata.runner.pipeline import Stage, join_group

    join_group(rank, 2, port, "cpu")
    stage = Stage(rank, 2, 2 * rank, 2 * rank + 2, 4)
    agreed = stage.agree([100 + rank, 7 - rank, 3])
    with open(f"{out}.{rank}", "w") as f:
        f.write(repr(agreed))
    torch.distributed.destroy_process_group()
    os._exit(0)  # as the stages do: gloo's threads may abort the interpreter's own teardown


def test_stages_agree_on_the_smallest_pools(tmp_path):
    """Each stage plans its own card; the scheduler's block ids and rows are the same everywhere, so every pool
    takes the smallest stage's size."""
    import torch.multiprocessing as mp

    from strata.runner.pipeline import free_port

    out = str(tmp_path / "agreed")
    mp.spawn(_agree_in_stage, args=(free_port(), out), nprocs=2)
    assert [open(f"{out}.{rank}").read() for rank in range(2)] == ["[100, 6, 3]"] * 2


def _graph_boundary_in_stage(rank: int, port: int, out: str) -> None:
    from strata.runner.pipeline import Stage, join_group

    join_group(rank, 3, port, "cpu")
    stage = Stage(rank, 3, rank, rank + 1, 3, graph_rows=8)
    rows = torch.arange(2 * 5 * 4, dtype=torch.float32).view(2, 5, 4)  # 2 activations of 5 real rows
    if rank == 0:  # eager: one message of the real rows
        stage.pass_on(*rows)
        result = None
    elif rank == 1:  # a graph of its layers: captured (no message), then one replay between the two eager stages
        with stage.capturing_layers():
            hidden, residual = stage.take_over(2, 8, 4, torch.float32, "cpu")  # padded rows, read by "the graph"
            outputs = [hidden * 2, residual + 1]                              # what "the graph" writes...
            stage.pass_on(*outputs)                                           # ...kept, not sent
        assert stage.graph_outputs is not None and len(stage.graph_outputs) == 2
        hidden.fill_(7)
        stage.receive_for_graph([(0, 0, 5)], 6)  # 5 real rows of a 6-row layout: the padding row zeroed, not what
        assert hidden[5].eq(0).all() and hidden[6:].eq(7).all()  # was left
        torch.mul(hidden, 2, out=outputs[0]), torch.add(residual, 1, out=outputs[1])  # the replay
        stage.send_from_graph(stage.graph_outputs, [(0, 0, 5)])
        result = None
    else:
        result = [t.tolist() for t in stage.take_over(2, 5, 4, torch.float32, "cpu")]
    _leave(stage, out, rank, result)


def test_a_stage_replaying_a_graph_sends_and_receives_as_an_eager_stage(tmp_path):
    """The middle of three stages runs its layers as a graph: captured without a message, then each replay
    receives the real rows before it and sends them after it, one message each, as the eager stages around it
    send and receive them."""
    import torch.multiprocessing as mp

    from strata.runner.pipeline import free_port

    out = str(tmp_path / "rows")
    mp.spawn(_graph_boundary_in_stage, args=(free_port(), out), nprocs=3)
    rows = torch.arange(2 * 5 * 4, dtype=torch.float32).view(2, 5, 4)
    assert open(f"{out}.2").read() == repr([(rows[0] * 2).tolist(), (rows[1] + 1).tolist()])
