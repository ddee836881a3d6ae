"""Long prompt chunks' attention on the CPU: torch SDPA on every core the engine may use, and a chunk after a
cached prefix as two unmasked calls merged by their log-sum-exps.

- Threads. The engine keeps torch one thread below the cores (engine/build.py: an OpenMP team spin-waits at each
  barrier for a descheduled member, which made many small ops 1.7-3x slower under load:
  bench/results/2026-12-01-cpu-threads). One SDPA call on a long chunk is a single parallel region of tens to
  hundreds of milliseconds, so a busy core costs it at most a time slice, and an idle one nearly halves it (a
  2,048-token causal chunk of SmolLM2's heads: 72 -> 38 ms on the 2-core VM). `large_op_threads` raises torch's
  count to `set_large_op_threads`'s ceiling for such a call only.
- The mask. A chunk with a cached prefix of C tokens attends to C + n keys, query i to the first C + i + 1: with
  an explicit [n, C + n] mask the CPU flash kernel computes every block of it (2,048 after 2,048: as slow as
  4,096 unmasked keys). `attend_after_prefix` runs the prefix unmasked and the chunk's own keys causally (flash
  kernel, blocks above the diagonal skipped) and merges the two by their log-sum-exps: 278 -> 188 ms there, within
  1e-7 of the masked result (the sums' order differs).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

# multiply-adds below which a call keeps the engine's thread count (~1 ms on one core: a barrier's possible
# stall stays small against the call)
LARGE_OP_MACS = 1 << 25

_ceiling = 0  # threads a large CPU op may take (0: keep torch's count)


def set_large_op_threads(threads: int) -> None:
    """The threads a large CPU op may take (engine/build.py: the cores this process may use when torch's thread
    count is automatic, else that count); 0 keeps torch's count."""
    global _ceiling
    if not isinstance(threads, int) or threads < 0:
        raise ValueError(f"large-op threads must be an integer >= 0, got {threads!r}")
    _ceiling = threads


def large_op_ceiling() -> int:
    return _ceiling


@contextlib.contextmanager
def large_op_threads(macs: int):
    """torch's intra-op threads raised to the ceiling for one call of `macs` multiply-adds, then set back."""
    threads = torch.get_num_threads()
    if macs < LARGE_OP_MACS or _ceiling <= threads:
        yield
        return
    torch.set_num_threads(_ceiling)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def attention_threads(q: torch.Tensor, kv_len: int, causal: bool):
    """large_op_threads for attention of q [B, H, n, D] (on the CPU) to kv_len keys: scores and values, halved
    when causal; a CUDA call keeps the count."""
    batch, heads, n, dim = q.shape
    return large_op_threads(2 * batch * heads * n * kv_len * dim // (2 if causal else 1) if q.is_cpu else 0)


def _flash_with_lse():
    """The CPU flash kernel's op returning (out, logsumexp), or None where this torch lacks it."""
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend_after_prefix(chunk: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_computed: int,
                        scale: float) -> torch.Tensor:
    """chunk [1, H, n, D] (positions num_computed ..), k / v [1, Hkv, num_computed + n, D] -> [1, H, n, D]:
    query i sees keys 0 .. num_computed + i. On the CPU in float32 / bfloat16 the prefix and the chunk's own keys
    are two unmasked flash calls merged by log-sum-exp; elsewhere one SDPA call with the causal window's mask."""
    n, kv_len = chunk.shape[2], k.shape[2]
    flash = _flash_with_lse()
    if chunk.device.type != "cpu" or flash is None or chunk.dtype not in (torch.float32, torch.bfloat16) \
            or num_computed == 0:
        q_pos = num_computed + torch.arange(n, device=chunk.device)
        mask = torch.arange(kv_len, device=chunk.device)[None, :] <= q_pos[:, None]  # [n, L]
        return F.scaled_dot_product_attention(chunk, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    with attention_threads(chunk, kv_len, causal=False):
        prefix, prefix_lse = flash(chunk, k[:, :, :num_computed], v[:, :, :num_computed], 0.0, False, scale=scale)
        own, own_lse = flash(chunk, k[:, :, num_computed:], v[:, :, num_computed:], 0.0, True, scale=scale)
    # [1, H, n] each: the weights of the two parts, relative to the larger
    top = torch.maximum(prefix_lse, own_lse)
    w_prefix, w_own = torch.exp(prefix_lse - top)[..., None], torch.exp(own_lse - top)[..., None]
    return ((prefix.float() * w_prefix + own.float() * w_own) / (w_prefix + w_own)).to(chunk.dtype)
