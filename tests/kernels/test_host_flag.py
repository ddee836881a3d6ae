"""The kernel a gated split graph begins with (strata/kernels/host_flag.py): it returns once the host raised the
flag, and clears it. Run in Triton's interpreter on the CPU (TRITON_INTERPRET=1, triton installed) or on CUDA."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

triton = pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("the kernel in Triton's interpreter: set TRITON_INTERPRET=1, triton installed", allow_module_level=True)

from strata.kernels.host_flag import HostFlag  # noqa: E402


def test_the_kernel_waits_for_the_flag_then_clears_it():
    flag = HostFlag()
    flag.raise_()
    flag.wait()  # already raised: returns at once
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    assert not flag.raised
    done = threading.Event()

    def waiter():
        flag.wait()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        done.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert not done.is_set()  # still waiting: the flag was cleared
    flag.raise_()
    thread.join(30)
    assert done.is_set() and not flag.raised
