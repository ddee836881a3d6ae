"""The engine's CPU thread count: chosen from the cores the process may use, one left over, overridable
by --torch-threads (issue 24, item 8: a thread per core collapses under any other load)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from live_server import ROOT
from strata.engine import build
from strata.model import cpu_sdpa


@pytest.fixture
def restore_threads():
    threads, ceiling = torch.get_num_threads(), cpu_sdpa.large_op_ceiling()
    yield
    torch.set_num_threads(threads)
    cpu_sdpa.set_large_op_threads(ceiling)


@pytest.mark.parametrize("cores, torch_default, expected", [(1, 1, 1), (2, 2, 1), (4, 4, 3), (16, 8, 8), (64, 64, 63)])
def test_auto_leaves_one_core_and_never_exceeds_torch_default(monkeypatch, restore_threads, cores, torch_default,
                                                               expected):
    monkeypatch.setattr(build, "available_cores", lambda: cores)
    torch.set_num_threads(torch_default)
    assert build.set_torch_threads(0) == expected
    assert torch.get_num_threads() == expected
    # a long op (a prompt chunk's attention) may take every core: one parallel region, not a team at each small op
    assert cpu_sdpa.large_op_ceiling() == max(expected, cores)


@pytest.mark.parametrize("cores, processes, expected", [(17, 2, 8), (17, 4, 4), (2, 2, 1), (9, 3, 2)])
def test_a_split_on_the_cpu_divides_the_cores_among_its_stages(monkeypatch, restore_threads, cores, processes,
                                                                expected):
    """--pipeline-parallel-size N on the CPU: each stage's process takes 1/N of the cores left over (at least one),
    so stages running groups at once do not each spin a team as large as the machine."""
    monkeypatch.setattr(build, "available_cores", lambda: cores)
    torch.set_num_threads(64)
    assert build.set_torch_threads(0, processes) == expected
    assert cpu_sdpa.large_op_ceiling() == max(expected, cores // processes)  # a stage's share of the cores
    assert build.set_torch_threads(5, processes) == 5  # an explicit count is each stage's
    assert cpu_sdpa.large_op_ceiling() == 0  # and every op's


def test_an_explicit_count_wins(monkeypatch, restore_threads):
    monkeypatch.setattr(build, "available_cores", lambda: 2)
    assert build.set_torch_threads(3) == 3 and torch.get_num_threads() == 3
    with pytest.raises(ValueError, match="torch_threads must be an integer >= 0"):
        build.set_torch_threads(-1)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores and CPU affinity")
def test_strata_generate_runs_on_the_cores_it_may_use_less_one():
    two_cores = set(sorted(os.sched_getaffinity(0))[:2])
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("OMP_NUM_THREADS", None)
    result = subprocess.run([sys.executable, "-m", "strata.cli.main", "generate", "--device", "cpu", "--prompt", "Hi",
                             "--max-tokens", "2", "--max-model-len", "256"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=240, preexec_fn=lambda: os.sched_setaffinity(0, two_cores))
    assert result.returncode == 0, result.stderr
    assert "torch CPU threads: 1 (2 cores available)" in result.stderr
