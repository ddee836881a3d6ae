"""`strata bench perplexity` on the bundled model (CPU, float32): its perplexity equals exp of HF transformers'
mean cross-entropy over the same windows' scored tokens (the second half of each, or all but the first); the
command reads a text file and writes the JSON result; bad window sizes are clear errors."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from strata import LLM
from strata.bench.perplexity import bench_perplexity, text_windows
from strata.cli.main import main

TEXT = ("Strata serves large mixture-of-experts language models from one machine. Its experts live in the GPU's "
        "memory when they fit and in the host's otherwise, where the CPU computes them or the GPU reads them over "
        "PCIe. Requests share every step, and each may speculate: drafts from a small head or from earlier text are "
        "verified by one pass of the target model for all requests at once. ") * 3


@pytest.fixture(scope="module")
def llm(bundled_gguf):
    return LLM(bundled_gguf, dtype="float32", device="cpu", max_num_seqs=4)


@pytest.fixture(scope="module")
def hf(bundled_gguf):
    from transformers import AutoModelForCausalLM

    from fast_gguf import fast_gguf_arrays

    folder, name = os.path.split(bundled_gguf)
    with fast_gguf_arrays():
        return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


def hf_perplexity(hf, windows: list[list[int]], first_scored: int) -> float:
    nll = []
    with torch.no_grad():
        for window in windows:
            logprobs = hf(torch.tensor([window])).logits[0].float().log_softmax(dim=-1)  # [T, V]
            nll += [-logprobs[i - 1, window[i]].item() for i in range(first_scored, len(window))]
    return math.exp(sum(nll) / len(nll))


@pytest.mark.parametrize("first_scored", [16, 1])
def test_perplexity_equals_hf_over_the_same_windows(llm, hf, first_scored):
    windows = text_windows(llm.tokenizer.encode(TEXT, add_special_tokens=False), 32, None)
    assert len(windows) >= 3 and all(len(w) == 32 for w in windows)
    result = bench_perplexity(llm, windows, first_scored)
    assert result["scored_tokens"] == len(windows) * (32 - first_scored)
    assert result["perplexity"] == pytest.approx(hf_perplexity(hf, windows, first_scored), rel=1e-4)
    assert 1.0 < result["perplexity"] and result["perplexity_stderr"] > 0


def test_windows_lead_with_bos_and_refuse_what_cannot_be_scored():
    windows = text_windows(list(range(10, 30)), 8, 1, max_windows=2)
    assert windows == [[1, *range(10, 17)], [1, *range(17, 24)]]
    with pytest.raises(ValueError, match="fewer than one window"):
        text_windows(list(range(5)), 8, None)
    with pytest.raises(ValueError, match="at least 3"):
        text_windows(list(range(50)), 2, 1)


def test_the_command_reads_a_text_file_and_writes_the_result(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "ppl.json"
    assert main(["bench", "perplexity", "--device", "cpu", "--dtype", "float32", "--text", str(text),
                 "--context", "24", "--max-windows", "2", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["bench"] == "perplexity" and doc["config"]["first_scored"] == 12
    assert doc["results"]["windows"] == 2 and doc["results"]["scored_tokens"] == 2 * 12
    assert "perplexity" in capsys.readouterr().out
