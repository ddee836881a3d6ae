"""Speculative decoding through the whole engine: greedy output identical to HF transformers with
every drafter, for one and for eight staggered requests; forced rejections at every position with
the recurrent state checked after rollback; sampled output keeps the target distribution;
configuration errors at start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata import LLM, SamplingParams
from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig
from strata.engine.core import EngineCore
from strata.spec.proposer import Proposer
from strata.types import Request
from tiny_models import build_hf_model

NEW_TOKENS = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def prompts(lengths) -> list[list[int]]:
    return [torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in lengths]


def hf_greedy(family: str, batch: list[list[int]]) -> list[list[int]]:
    hf = build_hf_model(family)
    return [hf.generate(torch.tensor([p]), do_sample=False, max_new_tokens=NEW_TOKENS)[0, len(p):].tolist()
            for p in batch]


def engine(folder: str, spec: dict | None, max_num_seqs: int = 8) -> EngineCore:
    config = EngineConfig(model=folder, runner=RunnerConfig(device="cpu", dtype="float32"),
                          scheduler=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=64),
                          speculative=SpecConfig.from_json(spec))
    return EngineCore(config, quiet=True)


def run_staggered(core: EngineCore, batch: list[list[int]], params=GREEDY, every: int = 2) -> list[list[int]]:
    """Request i arrives at step i * every; prompts longer than the budget are read in chunks."""
    outputs = {i: [] for i in range(len(batch))}
    step = 0
    while step == 0 or core.has_unfinished() or step <= every * len(batch):
        if step % every == 0 and step // every < len(batch):
            i = step // every
            core.add_request(Request(str(i), batch[i], params))
        for delta in core.step():
            outputs[int(delta.request_id)] += delta.new_token_ids
        step += 1
    return [outputs[i] for i in range(len(batch))]


SPECS_NEXT = [None, {"method": "mtp", "num_speculative_tokens": 1}, {"method": "mtp", "num_speculative_tokens": 2},
              {"method": "mtp", "num_speculative_tokens": 3}, {"method": "mtp", "num_speculative_tokens": 4},
              {"method": "suffix", "num_speculative_tokens": 3}, {"method": "mtp+suffix", "num_speculative_tokens": 3}]


@pytest.fixture(scope="module")
def next_refs():
    single, eight = prompts([29]), prompts([5, 23, 11, 40, 3, 17, 70, 9])
    return single, eight, hf_greedy("qwen3_next", single), hf_greedy("qwen3_next", eight)


@pytest.mark.parametrize("spec", SPECS_NEXT, ids=lambda s: "off" if s is None else f"{s['method']}-k{s['num_speculative_tokens']}")
def test_qwen3_next_greedy_identical_to_hf(spec, tiny_model_dir, next_refs):
    single, eight, single_ref, eight_ref = next_refs
    folder = tiny_model_dir("qwen3_next+mtp")
    assert run_staggered(engine(folder, spec, max_num_seqs=1), single) == single_ref
    core = engine(folder, spec)
    assert run_staggered(core, eight) == eight_ref
    if spec is not None:
        assert core.scheduler.stats.num_draft_tokens > 0  # the drafter really ran
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks
    assert sorted(core.scheduler.free_slots) == list(range(8))


@pytest.mark.parametrize("family, spec", [
    ("qwen3_5_moe", {"method": "mtp", "num_speculative_tokens": 3}),
    ("qwen3_5_moe", {"method": "mtp+suffix", "num_speculative_tokens": 2}),
    ("qwen4_exp", {"method": "mtp", "num_speculative_tokens": 3}),
], ids=["qwen3_5_moe-mtp", "qwen3_5_moe-mtp+suffix", "qwen4_exp-mtp"])
def test_mtp_families_greedy_identical_to_hf(family, spec, tiny_model_dir):
    """Qwen3.5-MoE and Qwen4-Exp with a random MTP head: speculation never changes HF's greedy output,
    alone or batched (HF's Qwen4-Exp has no MTP head: its drafts are Strata's own)."""
    single, eight = prompts([29]), prompts([5, 23, 11, 40, 3, 17, 70, 9])
    folder = tiny_model_dir(f"{family}+mtp")
    assert run_staggered(engine(folder, spec, max_num_seqs=1), single) == hf_greedy(family, single)
    core = engine(folder, spec)
    assert run_staggered(core, eight) == hf_greedy(family, eight)
    assert core.scheduler.stats.num_draft_tokens > 0


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "qwen3_5", "qwen4_exp"])
def test_suffix_greedy_identical_to_hf(family, tiny_model_dir):
    batch = prompts([7, 30, 12, 3, 44, 9, 21, 16])
    batch[1] = batch[1][:10] * 3  # repetitive prompts so suffix drafting finds matches
    batch[4] = batch[4][:11] * 4
    spec = {"method": "suffix", "num_speculative_tokens": 3}
    core = engine(tiny_model_dir(family), spec)
    assert run_staggered(core, batch) == hf_greedy(family, batch)
    assert core.scheduler.stats.num_draft_tokens > 0


@pytest.mark.parametrize("family, spec", [("qwen3_moe", {"method": "suffix", "num_speculative_tokens": 3}),
                                          ("qwen3_next+mtp", {"method": "mtp", "num_speculative_tokens": 3})])
def test_filler_drafts_make_windows_uniform_and_keep_output(family, spec, tiny_model_dir, monkeypatch):
    """With uniform windows (what CUDA graphs need), short proposals are padded with filler drafts:
    every decode step then has one window length, and greedy output is still HF's."""
    batch = prompts([7, 30, 12, 3, 44, 9])
    batch[1] = batch[1][:10] * 3
    core = engine(tiny_model_dir(family), spec)
    core.scheduler.uniform_draft_windows = True
    lengths = []
    execute = core.runner.execute

    def recording(plan):
        windows = {w.num_new_tokens for w in plan.scheduled if w.draft_token_ids or w.num_new_tokens == 1}
        if plan.scheduled and all(w.sample for w in plan.scheduled) and len(plan.scheduled) > 1:
            lengths.append(windows)
        return execute(plan)

    monkeypatch.setattr(core.runner, "execute", recording)
    assert run_staggered(core, batch) == hf_greedy(family.partition("+")[0], batch)
    decode_steps = [w for w in lengths if w]
    assert decode_steps and sum(len(w) == 1 for w in decode_steps) >= 0.8 * len(decode_steps)
    assert any(max(w) > 1 for w in decode_steps)


def wrong_at_every_position(reference: dict[tuple, list[int]]):
    """A drafter that proposes the true continuation with one wrong token, at a position that
    cycles through 0..k, so every rejection position (and full acceptance) is exercised."""
    calls = {"n": 0}

    def propose(self, scheduled, query_starts, input_ids, hidden, ctx, outcomes, *args):
        drafts = {}
        for work in scheduled:
            if not (work.sample and work.next_k):
                continue
            tokens = self.tokens[work.slot_id]
            prompt = next(p for p in reference if tuple(tokens[:len(p)]) == p)
            done = len(tokens) - len(prompt)
            true = reference[prompt][done:done + work.next_k]
            wrong = calls["n"] % (work.next_k + 1)
            calls["n"] += 1
            drafts[work.slot_id] = [(t + 1) % 160 if j == wrong else t for j, t in enumerate(true)]
        return drafts

    return propose


def test_mtp_layer_runs_only_for_requests_the_policy_gives_drafts(tiny_model_dir, next_refs, monkeypatch):
    """When the policy drafts nothing (k = 0 for every slot), neither decode steps nor prompt chunks run
    the MTP forward, and the output stays the plain one; when it drafts, prompt chunks feed it too."""
    import strata.spec.planner as planner_module

    _, eight, _, eight_ref = next_refs
    folder = tiny_model_dir("qwen3_next+mtp")

    def mtp_calls(core) -> list[int]:
        model, calls = core.runner.model, []
        mtp_forward = model.mtp_forward
        monkeypatch.setattr(model, "mtp_forward", lambda ids, *args: (calls.append(len(ids)), mtp_forward(ids, *args))[1])
        return calls

    drafting = engine(folder, {"method": "mtp", "num_speculative_tokens": 3})
    calls = mtp_calls(drafting)
    assert run_staggered(drafting, eight) == eight_ref
    assert max(calls) > 4          # a prompt chunk (prompts of 5..70 tokens) went through the MTP layer
    monkeypatch.setattr(planner_module, "draft_length", lambda *args, **kwargs: 0)
    silent = engine(folder, {"method": "mtp", "num_speculative_tokens": 3})
    calls = mtp_calls(silent)
    assert run_staggered(silent, eight) == eight_ref
    assert silent.scheduler.stats.num_draft_tokens == 0 and calls == []


def test_forced_rejections_keep_output_and_recurrent_state(tiny_model_dir, next_refs, monkeypatch):
    _, eight, _, eight_ref = next_refs
    folder = tiny_model_dir("qwen3_next")
    plain = engine(folder, None, max_num_seqs=1)
    run_staggered(plain, eight[:1])
    monkeypatch.setattr(Proposer, "propose", wrong_at_every_position({tuple(p): r for p, r in zip(eight, eight_ref)}))
    spec = engine(folder, {"method": "suffix", "num_speculative_tokens": 4, "adaptive": False}, max_num_seqs=1)
    assert run_staggered(spec, eight[:1]) == eight_ref[:1]
    stats = spec.scheduler.stats
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert all(0 < rate < 1 for rate in stats.acceptance_per_position()[:3])
    # after the rollbacks the slot's recurrent state equals the never-speculated run's
    for layer, (conv, ssm) in plain.runner.state_pool.caches.items():
        spec_conv, spec_ssm = spec.runner.state_pool.caches[layer]
        torch.testing.assert_close(spec_conv[0], conv[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(spec_ssm[0], ssm[0], rtol=1e-4, atol=1e-5)
    multi = engine(folder, {"method": "suffix", "num_speculative_tokens": 3, "adaptive": False})
    assert run_staggered(multi, eight) == eight_ref


def test_sampling_with_speculation_keeps_the_target_distribution(tiny_model_dir, monkeypatch):
    """Many requests, 3 sampled tokens each: the tokens at the speculated positions have the same distribution
    with drafts (which are often right and often wrong) as without. The requests with speculation are unseeded
    (speculative sampling; a seeded request's windows draw plain decoding's tokens: the test below)."""
    folder = tiny_model_dir("llama")
    prompt = prompts([6])[0]
    n = 3000
    params = [SamplingParams(temperature=0.5, top_p=0.95, max_tokens=3, ignore_eos=True, seed=s) for s in range(n)]
    off = LLM(folder, dtype="float32", device="cpu", max_num_seqs=64, block_size=4)
    baseline = np.array([o.outputs[0].token_ids for o in off.generate([{"prompt_token_ids": prompt}] * n, params)])
    # the drafter proposes the two most common spec-off continuations: right often enough to matter
    common = [int(np.bincount(baseline[:, j], minlength=160).argmax()) for j in (1, 2)]
    monkeypatch.setattr(Proposer, "propose", lambda self, scheduled, *a: {
        w.slot_id: common[: w.next_k] for w in scheduled if w.sample and w.next_k})
    on = LLM(folder, dtype="float32", device="cpu", max_num_seqs=64, block_size=4, seed=7,
             speculative_config={"method": "suffix", "num_speculative_tokens": 2, "adaptive": False})
    unseeded = SamplingParams(temperature=0.5, top_p=0.95, max_tokens=3, ignore_eos=True)
    spec = np.array([o.outputs[0].token_ids for o in on.generate([{"prompt_token_ids": prompt}] * n, unseeded)])
    stats = on.engine.scheduler.stats
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    for position in (1, 2):
        assert two_sample_p_value(baseline[:, position], spec[:, position]) > 1e-3
        # the drafted token is where a biased verifier would show first: compare its frequency directly
        a, b = (baseline[:, position] == common[position - 1]).mean(), (spec[:, position] == common[position - 1]).mean()
        pooled = (a + b) / 2
        assert abs(a - b) < 4 * np.sqrt(2 * pooled * (1 - pooled) / n)


def test_a_seeded_request_gives_the_same_tokens_with_or_without_speculation(tiny_model_dir, monkeypatch):
    """Seeded sampled requests: the tokens of plain decoding, with drafts of 1 or 3 tokens that are sometimes right
    (the most common plain-decoding token at each of the first positions, then a repeat of the last token)."""
    folder = tiny_model_dir("llama")
    prompt = prompts([6])[0]
    n, length = 48, 12
    params = [SamplingParams(temperature=0.7, top_p=0.95, max_tokens=length, ignore_eos=True, seed=s) for s in range(n)]
    off = LLM(folder, dtype="float32", device="cpu", max_num_seqs=16, block_size=4)
    baseline = [o.outputs[0].token_ids for o in off.generate([{"prompt_token_ids": prompt}] * n, params)]
    common = [int(np.bincount([tokens[j] for tokens in baseline], minlength=160).argmax()) for j in range(length)]
    monkeypatch.setattr(Proposer, "propose", lambda self, scheduled, *a: {
        w.slot_id: common[1:][:w.next_k] for w in scheduled if w.sample and w.next_k})
    for k in (1, 3):
        on = LLM(folder, dtype="float32", device="cpu", max_num_seqs=16, block_size=4,
                 speculative_config={"method": "suffix", "num_speculative_tokens": k, "adaptive": False})
        assert [o.outputs[0].token_ids for o in on.generate([{"prompt_token_ids": prompt}] * n, params)] == baseline
        stats = on.engine.scheduler.stats
        assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens


def two_sample_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square homogeneity test of two samples over tokens (rare tokens pooled into one bin)."""
    counts_a, counts_b = np.bincount(a, minlength=160), np.bincount(b, minlength=160)
    common = (counts_a + counts_b) >= 20
    table_a = np.append(counts_a[common], counts_a[~common].sum())
    table_b = np.append(counts_b[common], counts_b[~common].sum())
    keep = (table_a + table_b) > 0
    pooled = (table_a + table_b)[keep] / (table_a.sum() + table_b.sum())
    # comparing b to the pooled distribution is the homogeneity test up to a factor; use the exact form
    expected_a, expected_b = pooled * table_a.sum(), pooled * table_b.sum()
    stat = (((table_a[keep] - expected_a) ** 2 / expected_a).sum() + ((table_b[keep] - expected_b) ** 2 / expected_b).sum())
    dof = keep.sum() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))


@pytest.mark.parametrize("spec, message", [
    ({"method": "medusa"}, "unknown"),
    ({"method": "suffix", "num_speculative_tokens": -1}, "num_speculative_tokens"),
    ({"method": "suffix", "num_speculative_tokens": 99}, "num_speculative_tokens"),
    ({"method": "synthetic", "num_speculative_tokens": 3}, "acceptance_length"),
    ({"method": "suffix", "bogus": 1}, "unknown keys"),
])
def test_bad_speculative_config_is_refused_up_front(spec, message):
    with pytest.raises(ValueError, match=message):
        SpecConfig.from_json(spec)


def test_mtp_without_mtp_weights_is_refused_and_auto_falls_back(tiny_model_dir, caplog):
    with pytest.raises(ValueError, match="MTP head"):
        engine(tiny_model_dir("llama"), {"method": "mtp", "num_speculative_tokens": 2})
    core = engine(tiny_model_dir("llama"), {"method": "auto", "num_speculative_tokens": 2})
    assert core.spec.method == "suffix" and "no MTP head" in caplog.text
    assert engine(tiny_model_dir("qwen3_next+mtp"), {"method": "auto"}).spec.method == "mtp"


def test_synthetic_acceptance_drives_the_mean_accepted_length(tiny_model_dir):
    core = engine(tiny_model_dir("llama"), {"method": "synthetic", "num_speculative_tokens": 4,
                                            "acceptance_length": 3.0, "adaptive": False})
    run_staggered(core, prompts([5, 9, 13, 17]), SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True))
    assert abs(core.scheduler.stats.mean_accepted_length - 3.0) < 0.35


def test_cancel_waiting_mid_prompt_and_mid_verify_frees_everything(tiny_model_dir, next_refs):
    _, eight, _, eight_ref = next_refs
    core = engine(tiny_model_dir("qwen3_next+mtp"), {"method": "mtp", "num_speculative_tokens": 3}, max_num_seqs=2)
    core.add_request(Request("verifying", eight[0], GREEDY))
    core.add_request(Request("reading", prompts([200])[0], GREEDY))   # 200 tokens: read in 64-token chunks
    core.add_request(Request("waiting", eight[1], GREEDY))
    core.add_request(Request("survivor", eight[2], GREEDY))
    for _ in range(3):
        core.step()
    states = core.scheduler.requests
    assert states["verifying"].draft_token_ids and states["reading"].num_computed_tokens < 200
    for rid in ("verifying", "reading", "waiting"):
        assert core.abort_request(rid).finish_reason.value == "abort"
    tokens = []
    while core.has_unfinished():
        tokens += [t for d in core.step() for t in d.new_token_ids]
    assert tokens == eight_ref[2]
    assert core.scheduler.allocator.num_free == core.scheduler.allocator.num_blocks
    assert sorted(core.scheduler.free_slots) == [0, 1]


def test_preemption_with_speculation_resumes_exactly(tiny_model_dir, next_refs):
    _, eight, _, eight_ref = next_refs
    config = EngineConfig(model=tiny_model_dir("qwen3_next+mtp"), runner=RunnerConfig(device="cpu", dtype="float32"),
                          scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128),
                          cache=__import__("strata.config", fromlist=["CacheConfig"]).CacheConfig(
                              block_size=4, num_gpu_blocks=40),
                          speculative=SpecConfig.from_json({"method": "mtp", "num_speculative_tokens": 3}))
    core = EngineCore(config, quiet=True)
    assert run_staggered(core, eight[:4], every=1) == eight_ref[:4]
    assert any(s > 0 for s in [core.scheduler.stats.num_draft_tokens])
    assert core.scheduler.allocator.num_free == 40


def test_request_metrics_report_speculation(tiny_model_dir):
    llm = LLM(tiny_model_dir("llama"), dtype="float32", device="cpu",
              speculative_config={"method": "synthetic", "num_speculative_tokens": 3, "acceptance_length": 2.5})
    out = llm.generate({"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0.0, max_tokens=40,
                                                                      ignore_eos=True))[0]
    metrics = out.metrics
    assert metrics["num_draft_tokens"] > 0 and len(metrics["acceptance_per_position"]) == 3
    assert metrics["mean_accepted_length"] > 1.0 and metrics["num_preemptions"] == 0
    totals = llm.engine.status()["steps"]
    assert totals["num_accepted_tokens"] == metrics["num_accepted_tokens"] and totals["forward_seconds"] > 0


def test_a_new_request_starts_from_the_engines_acceptance(tiny_model_dir):
    """A drafter that never matches the traffic is learned once by the engine, not by every request:
    a new request's acceptance estimate starts where the verifications so far left it."""
    llm = LLM(tiny_model_dir("llama"), dtype="float32", device="cpu",
              speculative_config={"method": "synthetic", "num_speculative_tokens": 3, "acceptance_length": 1.0})
    scheduler = llm.engine.scheduler
    assert scheduler.planner.acceptance_prior == 1.0
    llm.generate({"prompt_token_ids": [5, 6, 7]}, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    assert scheduler.stats.num_draft_tokens > 0 and scheduler.planner.acceptance_prior < 0.5
    scheduler.add_request(Request("next", [5, 6, 7], SamplingParams(max_tokens=4)))
    assert scheduler.requests["next"].acceptance_ema == scheduler.planner.acceptance_prior


def test_mtp_drafts_kept_on_the_device_match_the_host_loop(tiny_model_dir, next_refs, monkeypatch):
    """Without a probability floor the MTP passes feed each other on the device and are read back once;
    with a floor (here one every draft passes) the host checks each pass. Both must draft the same
    tokens, and the outputs stay HF's."""
    _, eight, _, eight_ref = next_refs
    folder = tiny_model_dir("qwen3_next+mtp")
    proposed = {"device": [], "host": []}
    for kind, floor in (("device", 0.0), ("host", 1e-30)):
        core = engine(folder, {"method": "mtp", "num_speculative_tokens": 3, "adaptive": False,
                               "draft_prob_floor": floor})
        propose = core.runner.speculation.drafter.propose
        monkeypatch.setattr(core.runner.speculation.drafter, "propose",
                            lambda *args, out=proposed[kind], f=propose: (out.append(f(*args)), out[-1])[1])
        assert run_staggered(core, eight) == eight_ref
    assert proposed["device"] == proposed["host"] and sum(len(d) for p in proposed["host"] for d in p.values()) > 50


def test_the_draft_cost_model_sees_the_host_work_of_a_step(tiny_model_dir):
    """The cost model is fed each decode-only step's wall time from its start to its commits: host work
    (here 30 ms of extra commit work per step) counts, which a verification step cannot overlap with the
    device while a plain step planned ahead can."""
    import time

    llm = LLM(tiny_model_dir("llama"), dtype="float32", device="cpu", max_num_seqs=2,
              speculative_config={"method": "synthetic", "acceptance_length": 2.0, "num_speculative_tokens": 2})
    scheduler = llm.engine.scheduler
    update = scheduler.update
    scheduler.update = lambda plan, result: (time.sleep(0.03), update(plan, result))[1]
    llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}] * 2, SamplingParams(max_tokens=12, temperature=0.0,
                                                                          ignore_eos=True))
    seconds = scheduler.planner.cost.seconds
    assert seconds and min(seconds.values()) >= 0.03
