"""The CPU paged attention kernel (strata/kernels/cpu_attention.py): the causal softmax of each window's
queries over its sequence's keys read through the block table, against the float64 reference and against
the torch path the model takes without it; results independent of the batch and of the thread count."""

import pytest
import torch

from strata.kernels import cpu_attention, cpu_quant

pytestmark = pytest.mark.skipif(not cpu_attention.available(), reason="no C compiler for the native kernels")


def _case(seq_lens, query_lens, heads=6, kv_heads=2, dim=40, block=4, seed=0):
    """Random caches with each sequence's blocks scattered over the pool, and its window of queries."""
    g = torch.Generator().manual_seed(seed)
    width = max(-(-n // block) for n in seq_lens) + 1
    num_blocks = len(seq_lens) * width + 3
    k_cache = torch.randn(num_blocks, block, kv_heads, dim, generator=g)
    v_cache = torch.randn(num_blocks, block, kv_heads, dim, generator=g)
    order = torch.randperm(num_blocks, generator=g)
    tables = order[:len(seq_lens) * width].view(len(seq_lens), width).contiguous()  # [S, W] distinct blocks
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int64)
    q = torch.randn(int(starts[-1]), heads, dim, generator=g)
    return q, k_cache, v_cache, tables, torch.tensor(seq_lens, dtype=torch.int64), starts


@pytest.mark.parametrize("seq_lens, query_lens", [([1], [1]), ([37], [1]), ([5, 17, 9], [1, 1, 1]),
                                                  ([20, 7], [4, 7]), ([33, 16, 3, 64], [16, 1, 3, 2]),
                                                  ([2100, 1026, 1024], [1, 5, 2])])  # past one split of keys
@pytest.mark.parametrize("kv_heads", [1, 2, 6])
@pytest.mark.parametrize("build", ["best", "portable"])
def test_equals_the_float64_reference(seq_lens, query_lens, kv_heads, build, monkeypatch):
    """Either build of the kernel: the one this CPU takes (AVX2 + FMA on x86) and the portable one."""
    if build == "portable":
        monkeypatch.setattr(cpu_attention, "_kernel", lambda: getattr(cpu_quant._require(), cpu_quant._ATTENTION))
    q, k, v, tables, lens, starts = _case(seq_lens, query_lens, kv_heads=kv_heads)
    out = cpu_attention.paged_attention(q, k, v, tables, lens, starts, 0.125)
    ref = cpu_attention.paged_attention_ref(q, k, v, tables, lens, starts, 0.125)
    torch.testing.assert_close(out.double(), ref, atol=2e-6, rtol=2e-6)


def test_a_sequence_alone_gives_its_bits_in_a_batch_and_on_any_thread_count():
    q, k, v, tables, lens, starts = _case([300, 2500, 129], [2, 1, 5], heads=8, kv_heads=2, dim=64, block=16)
    batch = cpu_attention.paged_attention(q, k, v, tables, lens, starts, 0.1, context_tokens=1 << 20)  # threads
    for s in range(3):
        rows = slice(int(starts[s]), int(starts[s + 1]))
        alone = cpu_attention.paged_attention(q[rows].contiguous(), k, v, tables[s:s + 1].contiguous(), lens[s:s + 1],
                                              torch.tensor([0, rows.stop - rows.start]), 0.1, context_tokens=1)
        assert torch.equal(alone, batch[rows])
    cpu_quant.set_num_threads(1)
    try:
        assert torch.equal(cpu_attention.paged_attention(q, k, v, tables, lens, starts, 0.1, context_tokens=1 << 20),
                           batch)
    finally:
        cpu_quant._num_threads = None


@pytest.mark.parametrize("seq_lens", [[83, 40], [1026, 2051]])  # the second: windows across a split of keys
def test_a_windows_rows_give_the_bits_of_one_query_steps(seq_lens):
    """Speculative verification's exactness: each query of a window gives the bits that query gets alone as a
    one-token decode step at its own context length (a window's rows see fewer keys than its last one)."""
    q, k, v, tables, lens, starts = _case(seq_lens, [5, 3], heads=9, kv_heads=3, dim=64, block=16)
    window = cpu_attention.paged_attention(q, k, v, tables, lens, starts, 0.125)
    for s in range(2):
        nq = int(starts[s + 1] - starts[s])
        for j in range(nq):
            row = int(starts[s]) + j
            alone = cpu_attention.paged_attention(q[row:row + 1].contiguous(), k, v, tables[s:s + 1].contiguous(),
                                                  lens[s:s + 1] - (nq - 1 - j), torch.tensor([0, 1]), 0.125)
            assert torch.equal(alone[0], window[row]), (s, j)


def test_bad_operands_are_refused_with_what_was_given():
    q, k, v, tables, lens, starts = _case([9], [1])
    with pytest.raises(ValueError, match="contiguous CPU float32"):
        cpu_attention.paged_attention(q.double(), k, v, tables, lens, starts, 1.0)
    with pytest.raises(ValueError, match="contiguous CPU int64"):
        cpu_attention.paged_attention(q, k, v, tables.int(), lens, starts, 1.0)
    with pytest.raises(ValueError, match="does not match the caches"):
        cpu_attention.paged_attention(q[:, :5].contiguous(), k, v, tables, lens, starts, 1.0)


@pytest.mark.parametrize("head_dim, rot_dim, tokens", [(64, 64, 1), (40, 40, 5), (64, 32, 3)])
def test_rope_kv_gives_the_torch_paths_bits(head_dim, rot_dim, tokens):
    """rope_kv against the layer's torch path (RotaryEmbedding.rotate_rows over q and k, then write_kv_ref): the
    same rotated queries and the same pool, bit for bit, for a full and a partial rotation and rows of a wider qkv
    (a strided view); the other slots of the pool untouched."""
    from strata.kernels.kv_quant import write_kv_ref
    from strata.model.rotary import RotaryEmbedding

    heads, kv_heads, block, num_blocks = 6, 2, 4, 5
    g = torch.Generator().manual_seed(head_dim + tokens)
    width = (heads + 2 * kv_heads) * head_dim
    qkv = torch.randn(tokens, width + 8, generator=g)[:, :width] * 3                    # [T, (H + 2 Hkv) * D]
    rotary = RotaryEmbedding(head_dim, rot_dim, 4096, 10000.0, None)
    positions = torch.randint(0, 4000, (tokens,), generator=g)
    slots = torch.randperm(num_blocks * block, generator=g)[:tokens]
    caches = [torch.randn(num_blocks, block, kv_heads, head_dim, generator=g) for _ in range(2)]
    k_ref, v_ref = (c.clone() for c in caches)
    cos, sin = rotary.rows(positions)
    qk = qkv[:, :(heads + kv_heads) * head_dim].reshape(tokens, heads + kv_heads, head_dim)
    rotated = rotary.rotate_rows(qk, cos, sin)
    for x, cache in ((rotated[:, heads:], k_ref), (qkv[:, (heads + kv_heads) * head_dim:].reshape(tokens, kv_heads,
                                                                                                  head_dim), v_ref)):
        write_kv_ref(x, cache, None, slots)
    q = cpu_attention.rope_kv(qkv, heads, kv_heads, head_dim, cos, sin, slots, *caches)
    assert torch.equal(q, rotated[:, :heads]) and torch.equal(caches[0], k_ref) and torch.equal(caches[1], v_ref)


def test_rope_kv_refuses_a_slot_outside_the_pool_and_writes_nothing():
    from strata.model.rotary import RotaryEmbedding

    rotary = RotaryEmbedding(8, 8, 64, 10000.0, None)
    caches = [torch.zeros(2, 4, 1, 8) for _ in range(2)]
    qkv = torch.ones(2, (2 + 2) * 8)
    with pytest.raises(IndexError, match="outside the pool's 8"):
        cpu_attention.rope_kv(qkv, 2, 1, 8, *rotary.rows(torch.tensor([0, 1])), torch.tensor([3, 8]), *caches)
    assert not any(c.any() for c in caches)
    with pytest.raises(ValueError, match="do not fit"):
        cpu_attention.rope_kv(qkv[:, :20], 2, 1, 8, *rotary.rows(torch.tensor([0, 1])), torch.tensor([0, 1]), *caches)
