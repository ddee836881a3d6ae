"""`strata bench offline` end to end on a tiny random MoE model: the JSON carries throughput, latencies,
the step-time split, bytes per decode step and bandwidth, prefill speed and eager/graph arms."""

from __future__ import annotations

import builtins
import json

import pytest
import torch

from strata.bench.plot import write_plot
from strata.cli.main import main

TINY_MOE = ("random:qwen3-30b-a3b?num_hidden_layers=2&hidden_size=128&intermediate_size=256&moe_intermediate_size=64"
            "&num_attention_heads=4&num_key_value_heads=2&head_dim=32&num_experts=16&num_experts_per_tok=4"
            "&vocab_size=1000")
OUTPUT_LEN = 6


def _bench(tmp_path, *extra: str) -> dict:
    out = tmp_path / "result.json"
    argv = ["bench", "offline", TINY_MOE, "--device", "cpu", "--max-model-len", "128", "--num-prompts", "2",
            "--input-len", "8", "--output-len", str(OUTPUT_LEN), "--concurrency", "1,2", "--repeats", "2",
            "--copy-mib", "32", "--output", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    result = _bench(tmp, "--eager-vs-graph", "--prefill-lens", "16,32", "--decode-contexts", "8,40",
                    "--plot", str(tmp / "plot.png"))
    result["_plot"] = tmp / "plot.png"
    return result


def _strata_arms(doc: dict) -> dict:
    return {name: entry for name, entry in doc["results"].items() if name.startswith("strata")}


def test_arms_alternate_eager_and_graph_or_say_why_not(doc):
    names = set(doc["results"])
    if "unavailable_arms" in doc:
        assert names == {"strata_c1", "strata_c2"}
        assert set(doc["unavailable_arms"]) == {"strata_eager", "strata_graph"}
    else:
        assert names == {"strata_eager_c1", "strata_graph_c1", "strata_eager_c2", "strata_graph_c2"}
        for c in (1, 2):
            graph, eager = doc["results"][f"strata_graph_c{c}"], doc["results"][f"strata_eager_c{c}"]
            ratio = graph["median_output_tok_s"] / eager["median_output_tok_s"]
            assert graph["speedup_vs_eager"] == pytest.approx(ratio)


def test_old_keys_and_latencies(doc):
    for name, entry in _strata_arms(doc).items():
        assert len(entry["runs"]) == 2
        assert entry["median_output_tok_s"] > 0 and entry["median_per_stream_tok_s"] > 0
        for run in entry["runs"]:
            assert run["output_tokens"] == 2 * OUTPUT_LEN
            assert run["output_tok_s"] == pytest.approx(run["output_tokens"] / run["seconds"])
            assert 0 < run["ttft_ms"]["p50"] <= run["ttft_ms"]["p95"] <= run["ttft_ms"]["p99"]
            assert 0 < run["token_gap_ms"]["p50"] <= run["token_gap_ms"]["p95"]
            assert run["ttft_ms"]["p95"] < run["seconds"] * 1e3
        assert entry["median_ttft_p95_ms"] >= entry["median_ttft_p50_ms"] > 0
        assert entry["median_token_gap_p95_ms"] > 0


def test_step_split_adds_up_to_the_run(doc):
    for name, entry in _strata_arms(doc).items():
        for run in entry["runs"]:
            split = run["step_split_ms"]
            for kind in ("all", "decode"):
                s = split[kind]
                assert s["host"] >= 0 and s["forward"] > 0 and s["sample"] > 0 and s["draft"] >= 0
                assert s["forward"] + s["sample"] + s["draft"] + s["host"] == pytest.approx(s["wall"])
                assert 1 <= s["slots_per_step"] <= s["tokens_per_step"]
            # the steps happen inside the run (what is outside them is admission and bookkeeping, whose
            # share of a run this short depends on the machine's load: not asserted)
            assert 0 < run["step_seconds_total"] <= run["seconds"]
            assert run["graph_steps"] == {"mixed": 0, "parts": 0}  # no CUDA graphs on a CPU
            # every output token after the first comes from a decode step: 2 prompts one after the other
            # at concurrency 1, side by side at 2
            concurrency = int(name.rsplit("_c", 1)[1])
            assert split["decode"]["num_steps"] == (OUTPUT_LEN - 1) * (2 if concurrency == 1 else 1)
            assert split["all"]["num_steps"] == split["decode"]["num_steps"] + (2 if concurrency == 1 else 1)


def test_bytes_and_bandwidth(doc):
    model = doc["roofline"]["model"]
    assert doc["roofline"]["device_copy_bandwidth_bytes_s"] > 0
    assert model["params"]["num_moe_layers"] == 2 and model["bytes"]["expert_bytes"] == 3 * 128 * 64 * 4
    for name, entry in _strata_arms(doc).items():
        concurrency = int(name.rsplit("_c", 1)[1])
        for run in entry["runs"]:
            roof, decode = run["roofline"], run["step_split_ms"]["decode"]
            parts = roof["bytes_per_decode_step"]
            assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
            assert parts["dense"] == model["bytes"]["dense_bytes"]
            # 1 or 2 slots, each attending over 8 prompt tokens plus what it has generated
            context = parts["kv"] / model["bytes"]["kv_bytes_per_token"]
            assert 9 * concurrency <= context <= (8 + OUTPUT_LEN) * concurrency
            if roof["experts_touched_source"] == "upper_bound_estimate":
                assert roof["experts_touched_per_layer"] == 4 * concurrency   # top-4 per token, one token per slot
            else:
                assert roof["experts_touched_source"] == "measured"
                assert 4 <= roof["experts_touched_per_layer"] <= 4 * concurrency
            assert roof["mean_decode_step_ms"] == pytest.approx(decode["wall"])
            assert roof["achieved_bandwidth_bytes_s"] == pytest.approx(parts["total"] / (decode["wall"] / 1e3))
            assert 0 < roof["bandwidth_fraction"] == pytest.approx(
                roof["achieved_bandwidth_bytes_s"] / doc["roofline"]["device_copy_bandwidth_bytes_s"])
        assert entry["median_bandwidth_fraction"] > 0


def test_prefill(doc):
    assert set(doc["prefill"]) == {"prefill_16", "prefill_32"}
    for n in (16, 32):
        entry = doc["prefill"][f"prefill_{n}"]
        assert len(entry["runs_seconds"]) == 2
        assert entry["median_prefill_tok_s"] == pytest.approx(n / entry["median_seconds"])
        assert entry["flops_per_token"] == 2 * doc["roofline"]["model"]["params"]["active"]
        assert "gemm_peak_fraction" not in entry          # CPU: no bf16 GEMM peak measured
    assert "bf16_gemm_flops" not in doc["roofline"]


def test_plot(doc):
    pytest.importorskip("matplotlib")
    assert doc["_plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_from_a_saved_result(doc, tmp_path):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps({k: v for k, v in doc.items() if k != "_plot"}))
    assert main(["bench", "plot", str(saved), "--output", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").read_bytes()[:4] == b"\x89PNG"
    saved.write_text(json.dumps({"bench": "serve"}))
    assert main(["bench", "plot", str(saved), "--output", str(tmp_path / "no.png")]) == 2


def test_plot_without_matplotlib(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    message = write_plot({"results": {}, "config": {"model": "m", "concurrency": [1]}}, str(tmp_path / "p.png"))
    assert "matplotlib is not installed" in message and not (tmp_path / "p.png").exists()


def test_speculation_arms_side_by_side(tmp_path):
    # a fixed k: the adaptive policy may rightly draft nothing in a run this short on a busy machine
    doc = _bench(tmp_path, "--speculative-config", '{"method": "synthetic", "acceptance_length": 2.0, "adaptive": false}',
                 "--spec-baseline", "--concurrency", "2", "--repeats", "1")
    spec, base = doc["results"]["strata_spec_c2"], doc["results"]["strata_nospec_c2"]
    assert spec["speedup_vs_nospec"] == pytest.approx(spec["median_output_tok_s"] / base["median_output_tok_s"])
    spec_decode = spec["runs"][0]["step_split_ms"]["decode"]
    # verify windows are decode steps too; they emit more than one token per slot, so fewer steps
    assert 0 < spec_decode["num_steps"] < base["runs"][0]["step_split_ms"]["decode"]["num_steps"]
    # a fixed k of 3 (the default): windows of up to 4 rows (fewer where a request's last tokens leave less room),
    # where plain decode steps take 1 row a slot
    assert spec_decode["slots_per_step"] < spec_decode["tokens_per_step"] <= 4 * spec_decode["slots_per_step"]
    assert base["runs"][0]["step_split_ms"]["decode"]["tokens_per_step"] == \
        pytest.approx(base["runs"][0]["step_split_ms"]["decode"]["slots_per_step"])
    assert spec["runs"][0]["mean_accepted_length"] > 1.0
    # the byte model's bound on the gain: at most the tokens a window commits, more than nothing
    window = spec["runs"][0]["mean_window_tokens"]
    assert window >= spec["runs"][0]["mean_accepted_length"]
    assert 0 < spec["byte_model_bound_vs_nospec"] <= spec["runs"][0]["mean_accepted_length"] + 1e-9


def test_hf_peer_on_a_random_shape(tmp_path):
    doc = _bench(tmp_path, "--hf-peer", "--repeats", "1")
    assert set(doc["results"]) == {"strata_c1", "strata_c2", "hf_generate_b1", "hf_generate_b2"}
    hf = doc["results"]["hf_generate_b2"]
    assert hf["runs"][0]["output_tokens"] == 2 * OUTPUT_LEN
    assert hf["ratio_vs_hf_single_stream"] == pytest.approx(
        hf["median_output_tok_s"] / doc["results"]["hf_generate_b1"]["median_output_tok_s"])


class _FakeCore:
    """What bench_offline needs of an EngineCore when run_strata is stubbed: the public runtime switches
    (recorded), a runner with CUDA graphs and the loaded model (for its weights' bytes)."""

    device, dtype = "cpu", "float32"

    def __init__(self):
        from strata.weights.source import open_source

        self.model_config = open_source(TINY_MOE).model_config()
        self.loaded = type("Loaded", (), {"model": torch.nn.Module()})()  # no packed weights: config bytes
        self.runner = type("Runner", (), {"graphs": object()})()
        self.max_num_seqs, self.graphs, self.overlapped = 8, None, None
        self.options: list[dict] = []

    def set_runtime_options(self, *, cuda_graphs=None, async_scheduling=None, max_num_seqs=None) -> None:
        self.options.append(dict(cuda_graphs=cuda_graphs, async_scheduling=async_scheduling, max_num_seqs=max_num_seqs))
        self.graphs = self.graphs if cuda_graphs is None else cuda_graphs
        self.overlapped = self.overlapped if async_scheduling is None else async_scheduling
        self.max_num_seqs = self.max_num_seqs if max_num_seqs is None else max_num_seqs


def _stub_runs(monkeypatch) -> list[tuple]:
    from strata.bench import offline

    calls = []
    monkeypatch.setattr(offline, "run_strata", lambda engine, prompts, output_len, *a, **k: calls.append(
        (engine.engine.max_num_seqs, engine.engine.graphs, engine.engine.overlapped, output_len)) or {})
    monkeypatch.setattr(offline, "summarise", lambda runs: {})
    monkeypatch.setattr(offline, "_add_ratios", lambda *a: None)
    monkeypatch.setattr(offline, "measure_copy_bandwidth", lambda *a: 1.0)
    return calls


def test_each_arm_warms_up_once_per_concurrency_before_its_first_measured_run(monkeypatch):
    from strata.bench import offline

    calls = _stub_runs(monkeypatch)
    engine = type("Engine", (), {"engine": _FakeCore()})()
    opts = offline.OfflineOptions(TINY_MOE, num_prompts=2, output_len=5, concurrency=(1, 2), repeats=2,
                                  warmup_output_len=3)
    offline.bench_offline(engine, opts)
    # start-up warm-up at the largest concurrency, then per concurrency: one 3-token warm-up before the
    # first of the 5-token runs
    assert [(c, n) for c, _, _, n in calls] == [(2, 4), (1, 3), (1, 5), (2, 3), (2, 5), (1, 5), (2, 5)]


def test_arms_switch_graphs_and_async_through_the_public_options(monkeypatch):
    from strata.bench import offline

    calls = _stub_runs(monkeypatch)
    engine = type("Engine", (), {"engine": _FakeCore()})()
    opts = offline.OfflineOptions(TINY_MOE, num_prompts=2, output_len=5, concurrency=(2,), repeats=1,
                                  eager_vs_graph=True, sync_vs_async=True, warmup_output_len=0)
    offline.bench_offline(engine, opts)
    arms = [(False, False), (False, True), (True, False), (True, True)]   # (graphs, async) of each arm in order
    assert calls == [(2, g, a, 4) for g, a in arms] + [(2, g, a, 5) for g, a in arms]


def test_graph_arms_unavailable_without_graphs(monkeypatch):
    from strata.bench import offline

    _stub_runs(monkeypatch)
    core = _FakeCore()
    core.runner.graphs = None
    engine = type("Engine", (), {"engine": core})()
    sections = offline.bench_offline(engine, offline.OfflineOptions(TINY_MOE, concurrency=(1, 2), repeats=1,
                                                                    eager_vs_graph=True))
    assert set(sections["unavailable_arms"]) == {"strata_eager", "strata_graph"}
    assert "no CUDA graphs" in sections["unavailable_arms"]["strata_graph"]
    assert core.options and all(options["cuda_graphs"] is None for options in core.options)


def test_concurrency_above_the_slots_built_fails_before_any_run(monkeypatch):
    from strata.bench import offline
    from strata.engine.llm import LLM

    calls = _stub_runs(monkeypatch)
    llm = LLM(TINY_MOE, device="cpu", max_model_len=64, max_num_seqs=2)
    with pytest.raises(ValueError, match=r"max_num_seqs must be in \[1, 2\].*got 4"):
        offline.bench_offline(llm, offline.OfflineOptions(TINY_MOE, concurrency=(1, 4), repeats=1))
    assert calls == []


def test_sync_and_async_scheduling_arms_side_by_side(tmp_path):
    doc = _bench(tmp_path, "--sync-vs-async", "--repeats", "1")
    assert set(doc["results"]) == {"strata_sync_c1", "strata_async_c1", "strata_sync_c2", "strata_async_c2"}
    assert doc["config"]["sync_vs_async"] is True
    for c in (1, 2):
        sync, overlapped = doc["results"][f"strata_sync_c{c}"], doc["results"][f"strata_async_c{c}"]
        assert overlapped["speedup_vs_sync"] == pytest.approx(
            overlapped["median_output_tok_s"] / sync["median_output_tok_s"])
        assert overlapped["runs"][0]["output_tokens"] == sync["runs"][0]["output_tokens"] == 2 * OUTPUT_LEN


def test_decode_at_long_contexts_is_one_stream_per_length(doc):
    section = doc["long_context"]
    assert set(section) == {"decode_at_8", "decode_at_40"}
    for n in (8, 40):
        entry = section[f"decode_at_{n}"]
        assert entry["context_tokens"] == n and entry["output_tokens"] == OUTPUT_LEN
        assert len(entry["runs"]) == 2                      # one per repeat
        assert entry["median_tpot_ms"] > 0 and entry["median_ttft_ms"] > 0
        assert entry["median_decode_tok_s"] == pytest.approx(1e3 / entry["median_token_gap_ms"])
        gaps = sorted(run["token_gap_p50_ms"] for run in entry["runs"])
        assert entry["median_token_gap_ms"] == pytest.approx((gaps[0] + gaps[1]) / 2)
        shortest = section["decode_at_8"]["median_decode_tok_s"]
        assert entry["ratio_vs_shortest"] == pytest.approx(entry["median_decode_tok_s"] / shortest)
    assert doc["config"]["decode_contexts"] == [8, 40]


def test_decode_contexts_longer_than_the_model_length_are_refused(tmp_path, capsys):
    argv = ["bench", "offline", TINY_MOE, "--device", "cpu", "--max-model-len", "128", "--output-len",
            str(OUTPUT_LEN), "--decode-contexts", "200", "--output", str(tmp_path / "result.json")]
    assert main(argv) != 0
    assert "--decode-contexts 200 needs max_model_len of at least 206 (it is 128)" in capsys.readouterr().err
    assert not (tmp_path / "result.json").exists()


def test_prefill_warms_up_each_length_before_timing_it(monkeypatch):
    """A length's first prompt compiles what its shapes need: every length is read once, prefix cache emptied,
    before the timed repeats."""
    from types import SimpleNamespace

    from strata.bench import prefill

    events = []
    allocator = SimpleNamespace(reset_prefix_cache=lambda: events.append("reset"))
    core = SimpleNamespace(device="cpu", model_config=None, scheduler=SimpleNamespace(allocator=allocator))
    llm = SimpleNamespace(engine=core,
                          generate=lambda prompts, params: events.append(len(prompts[0]["prompt_token_ids"])))
    monkeypatch.setattr(prefill, "count_params", lambda config: SimpleNamespace(active=10))
    results, gemm = prefill.bench_prefill(llm, (4, 8), repeats=2, prompts={4: [1] * 4, 8: [1] * 8})
    assert events == ["reset", 4, "reset", 8] + ["reset", 4, "reset", 8] * 2
    assert set(results) == {"prefill_4", "prefill_8"} and gemm is None
    assert len(results["prefill_8"]["runs_seconds"]) == 2


def test_the_summary_line_gives_each_streams_decode_rate_beside_the_end_to_end_one(capsys):
    """A run's line: output tok/s (prompts included), then a stream's decode rate from the mean gap between its
    tokens (1000 / tpot p50 ms: what llama-bench's tg reports), so the two are not mistaken for each other."""
    from strata.cli.bench import _print_offline

    entry = {"median_output_tok_s": 690.0, "median_ttft_p50_ms": 15.0, "median_ttft_p95_ms": 16.0,
             "median_token_gap_p95_ms": 1.4, "median_tpot_p50_ms": 1.25}
    _print_offline({"results": {"strata_c1": entry, "hf_c1": {"median_output_tok_s": 100.0}}})
    strata_line, hf_line = capsys.readouterr().out.splitlines()
    assert "690.0 tok/s" in strata_line and strata_line.endswith("decode 800 tok/s a stream")
    assert "decode" not in hf_line


def test_a_run_leaves_no_step_in_flight(tiny_model_dir):
    """Verification steps planned ahead with uniform windows (as CUDA graphs take them) queue one more step for
    requests that may all end in the step before it; a run drains it, so the next arm's options switch (the
    benchmark failed there on an H100, session 64)."""
    from strata import LLM
    from strata.bench.offline import run_strata
    from strata.config import EngineConfig, RunnerConfig, SchedulerConfig, SpecConfig

    spec = SpecConfig.from_json('{"method": "synthetic", "acceptance_length": 3.0, "num_speculative_tokens": 3, '
                                '"adaptive": false}')
    llm = LLM.from_config(EngineConfig(model=tiny_model_dir("llama"), runner=RunnerConfig(device="cpu"),
                                       scheduler=SchedulerConfig(max_num_seqs=4, async_scheduling=True),
                                       speculative=spec))
    core = llm.engine
    core.scheduler.uniform_draft_windows = True
    queued = []
    launch = core._launch
    core._launch = lambda kind, plan, inputs_from=None: queued.append(inputs_from is not None) or launch(
        kind, plan, inputs_from)
    prompts = [[5 + (i * 7 + j) % 90 for j in range(8 + i)] for i in range(8)]
    result = run_strata(llm, prompts, 24)
    assert result["output_tokens"] == 8 * 24 and sum(queued) > 10  # most steps were planned ahead
    assert not core.has_unfinished() and core._ahead is None
    core.set_runtime_options(async_scheduling=False, max_num_seqs=2)
