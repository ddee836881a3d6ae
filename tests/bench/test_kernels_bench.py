"""`strata bench kernels` where it cannot run (no Triton, no CUDA device, an unknown family): one line on
stderr and exit status 2, before strata.bench.kernels (which imports Triton) is imported."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from strata.cli.main import main


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("strata: error: ")
    return err


def test_without_triton(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "triton", None)   # `import triton` raises ImportError
    assert main(["bench", "kernels", "--no-sweep"]) == 2
    assert "needs CUDA and Triton: triton is not installed" in _error_line(capsys)


def test_without_a_cuda_device(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "kernels", "--only", "moe"]) == 2
    assert "needs CUDA and Triton: no CUDA device is visible to torch" in _error_line(capsys)


@pytest.mark.parametrize("only", ["moe,mlp", "attn"])
def test_unknown_family(only, capsys):
    assert main(["bench", "kernels", "--only", only]) == 2
    assert "unknown kernel families" in _error_line(capsys)
