"""The CPU row-invariant float32 linear (strata/kernels/cpu_linear.py): x @ W.T (+ bias) against float64, and
each row's bits the same alone, in any batch, on any thread count and in either build (the MoE routers' top-k
must not move between a decode step and a verification window)."""

import pytest
import torch

from strata.kernels import cpu_linear, cpu_quant

pytestmark = pytest.mark.skipif(not cpu_linear.available(), reason="no C compiler for the native kernels")


@pytest.mark.parametrize("rows, n, k", [(1, 16, 256), (5, 33, 100), (12, 512, 2048), (3, 7, 31), (64, 40, 96)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("build", ["best", "portable"])
def test_equals_float64_and_each_row_alone(rows, n, k, bias, build, monkeypatch):
    """Widths with and without a tail past the last 32-value span; rows in pairs and one left over."""
    if build == "portable":
        monkeypatch.setattr(cpu_linear, "_kernel", lambda: getattr(cpu_quant._require(), cpu_quant._LINEAR))
    gen = torch.Generator().manual_seed(rows * 1000 + n + k)
    x, w = torch.randn(rows, k, generator=gen), torch.randn(n, k, generator=gen) / k ** 0.5
    b = torch.randn(n, generator=gen) if bias else None
    y = cpu_linear.row_linear(x, w, b)
    ref = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    for i in range(rows):
        assert torch.equal(cpu_linear.row_linear(x[i:i + 1].contiguous(), w, b)[0], y[i]), i


def test_rows_keep_their_bits_on_one_thread_and_in_the_other_build(monkeypatch):
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(9, 2048, generator=gen), torch.randn(512, 2048, generator=gen)
    best = cpu_linear.row_linear(x, w)
    cpu_quant.set_num_threads(1)
    try:
        assert torch.equal(cpu_linear.row_linear(x, w), best)
    finally:
        cpu_quant._num_threads = None
    monkeypatch.setattr(cpu_linear, "_kernel", lambda: getattr(cpu_quant._require(), cpu_quant._LINEAR))
    assert torch.equal(cpu_linear.row_linear(x, w), best)


def test_tensors_it_cannot_read_are_refused():
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    assert cpu_linear.fits(x, w, None) and not cpu_linear.fits(x.double(), w, None)
    assert not cpu_linear.fits(x, w.t().contiguous().t(), None) and not cpu_linear.fits(x, w, torch.randn(3))
    with pytest.raises(ValueError, match="contiguous CPU float32"):
        cpu_linear.row_linear(x, torch.randn(4, 9))
