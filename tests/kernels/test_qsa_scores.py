"""QSA block scores: the ref against QSAIndexer.visible (CPU: the same blocks chosen for every sparse row), and
the Triton kernel against the ref, in Triton's interpreter (TRITON_INTERPRET=1 with triton installed, on CPU
tensors; skipped otherwise) and on CUDA (`-m gpu`). Tolerances: float32 1e-5; bf16 1e-2 (a pooled, normed or
rotated key element may round to the other side, one bf16 step, after float32 sums in another order)."""

from __future__ import annotations

import os

import pytest
import torch

from strata.config import ModelConfig
from strata.kernels.qsa_scores import qsa_block_scores_ref
from strata.model.qsa import QSAIndexer
from strata.model.rotary import RotaryEmbedding

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernel in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")

BLOCK_SIZE, NUM_HEADS, TOP_BLOCKS = 16, 4, 4
# (context length after the step, window rows): long and short contexts, a window whose first rows are dense
# and last sparse (21 at ratio 4), dense windows, an empty padding window
WINDOWS = [(300, 1), (37, 4), (21, 4), (130, 16), (9, 1), (16, 4), (0, 0)]


def problem(windows, head_dim, rot_dim, ratio, dtype, device, seed=0):
    """Index queries and a shuffled paged key cache for `windows` -> the kernel's arguments (width: the
    widest complete-block count plus a tile's worth of padding). Spare blocks, positions past each context
    and padding table columns hold NaN, so a key read from outside a context shows."""
    generator = torch.Generator().manual_seed(seed)
    seq_lens = [length for length, _ in windows]
    per_seq = [-(-length // BLOCK_SIZE) for length in seq_lens]
    num_blocks = sum(per_seq) + 3
    ids = torch.randperm(num_blocks, generator=generator).tolist()
    nan_block, tables, start = ids[-1], [], 0
    key_cache = torch.randn(num_blocks, BLOCK_SIZE, 1, head_dim, generator=generator)
    key_cache[ids[sum(per_seq):]] = float("nan")
    for length, n in zip(seq_lens, per_seq):
        tables.append(ids[start:start + n])
        if length % BLOCK_SIZE:
            key_cache[tables[-1][-1], length % BLOCK_SIZE:] = float("nan")
        start += n
    columns = max(per_seq) + 2
    block_tables = torch.tensor([t + [nan_block] * (columns - len(t)) for t in tables], dtype=torch.int32)
    index_q = torch.randn(sum(n for _, n in windows), NUM_HEADS, head_dim, generator=generator)
    norm_weight = torch.randn(head_dim, generator=generator) * 0.3
    rotary = RotaryEmbedding(64, rot_dim, 512, 10000.0)
    query_start_loc = torch.tensor([0, *torch.tensor([n for _, n in windows]).cumsum(0).tolist()], dtype=torch.int32)
    width = max(length // ratio for length in seq_lens) + 37
    tensors = dict(index_q=index_q.to(dtype), key_cache=key_cache.to(dtype), block_tables=block_tables,
                   seq_lens=torch.tensor(seq_lens, dtype=torch.int32), query_start_loc=query_start_loc,
                   norm_weight=norm_weight.to(dtype), cos=rotary.cos, sin=rotary.sin)
    return {**{k: v.to(device) for k, v in tensors.items()}, "eps": 1e-6, "rot_dim": rot_dim, "ratio": ratio,
            "top_blocks": TOP_BLOCKS, "width": width}, rotary


def sparse_rows(windows, ratio):
    """(token row, its position, its complete-block count) of every row seeing more than TOP_BLOCKS blocks."""
    rows, token = [], 0
    for length, n in windows:
        for j in range(n):
            position = length - n + j
            if (position + 1) // ratio > TOP_BLOCKS:
                rows.append((token, position, (position + 1) // ratio))
            token += 1
    return rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ratio", [4, 3])
def test_ref_picks_the_blocks_visible_picks(dtype, ratio):
    """Every sparse row's top TOP_BLOCKS blocks by the ref's scores, plus the tokens after its last complete
    block, are the tokens QSAIndexer.visible lets it see; its scores past its complete blocks are -inf. The
    windows' rows sit in one batch, their sequences' blocks shuffled in one pool (ratio 3 straddles pages)."""
    args, rotary = problem(WINDOWS, 40, 16, ratio, dtype, "cpu")
    cfg = ModelConfig(architecture="Qwen4ExpForCausalLM", vocab_size=8, hidden_size=16, intermediate_size=8,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                      indexer_n_heads=NUM_HEADS, indexer_head_dim=40, indexer_budget=TOP_BLOCKS * ratio,
                      indexer_compress_ratio=ratio, rms_norm_eps=args["eps"])
    indexer = QSAIndexer(cfg, 0).to(dtype)
    with torch.no_grad():
        indexer.k_layernorm.weight.copy_(args["norm_weight"])
    scores = qsa_block_scores_ref(**args)
    starts = args["query_start_loc"].tolist()
    masks = {}
    for i, (length, n) in enumerate(WINDOWS):
        if indexer.is_sparse(length):
            table = args["block_tables"][i, : -(-length // BLOCK_SIZE)]
            masks[i] = indexer.visible(args["index_q"][starts[i]:starts[i] + n], length - n, length,
                                       args["key_cache"], table, rotary)                          # [n, L]
    rows = sparse_rows(WINDOWS, ratio)
    assert len(rows) > 20 and len(masks) >= 4
    for token, position, complete in rows:
        seq = max(i for i in range(len(WINDOWS)) if starts[i] <= token)
        length = WINDOWS[seq][0]
        assert scores[token, :complete].isfinite().all() and (scores[token, complete:] == float("-inf")).all()
        top = scores[token, :complete].topk(TOP_BLOCKS).indices
        tokens = torch.arange(length)
        chosen = torch.isin(tokens // ratio, top) | (tokens >= complete * ratio)
        assert torch.equal(masks[seq][token - starts[seq]], chosen & (tokens <= position))


def move_to_host_tier(args: dict, host_counts: list[int], device: str) -> None:
    """Move each sequence's first host_counts blocks of keys to a host tier (pinned on CUDA), leaving NaN in
    their device copies and -1 in their table columns, so a key read from the wrong tier shows."""
    keys, tables = args["key_cache"], args["block_tables"]
    host_cache = torch.zeros(sum(host_counts) + 1, *keys.shape[1:], dtype=keys.dtype,
                             pin_memory=torch.device(device).type == "cuda")
    host_tables = torch.zeros(len(host_counts), max(host_counts), dtype=tables.dtype)
    next_block = 1                                                   # host block 0 stays unused
    for i, count in enumerate(host_counts):
        for column in range(count):
            host_cache[next_block] = keys[tables[i, column]].cpu()
            keys[tables[i, column]] = float("nan")
            tables[i, column] = -1
            host_tables[i, column] = next_block
            next_block += 1
    args["host"] = (host_cache, host_tables.to(device), torch.tensor(host_counts, device=device))


def check_kernel(dtype, ratio, head_dim, rot_dim, device, host_counts=None):
    from strata.kernels.qsa_scores import qsa_block_scores

    args, _ = problem(WINDOWS, head_dim, rot_dim, ratio, dtype, device, seed=ratio + head_dim)
    expected = qsa_block_scores_ref(**{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args.items()})
    if host_counts is not None:
        move_to_host_tier(args, host_counts, device)
        ref_args = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        ref_args["host"] = tuple(t.cpu() for t in args["host"])
        assert torch.equal(qsa_block_scores_ref(**ref_args), expected)  # the ref reads the host tier too
    out = qsa_block_scores(**args)
    rows = torch.tensor([token for token, _, _ in sparse_rows(WINDOWS, ratio)])
    out, expected = out.cpu()[rows], expected[rows]                                   # [sparse rows, width]
    assert out.shape == expected.shape and not out.isnan().any()
    assert torch.equal(out == float("-inf"), expected == float("-inf")) and expected.isfinite().any()
    finite = expected.isfinite()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out[finite], expected[finite], rtol=tol, atol=tol)


KERNEL_CASES = [(4, 40, 16), (3, 32, 32), (4, 128, 64)]  # (ratio, Di, rot_dim): partial and full rotation


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("ratio, head_dim, rot_dim", KERNEL_CASES)
def test_kernel_matches_ref_interpreted(dtype, ratio, head_dim, rot_dim):
    """The kernel's scores for every sparse row (dense rows are its to skip) equal the ref's: -inf at the same
    entries up to `width`, the finite ones within tolerance; keys read through shuffled tables, pages straddled
    (ratio 3), tiles past every row's blocks, a window half dense, an empty one."""
    check_kernel(dtype, ratio, head_dim, rot_dim, "cpu")


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ratio, head_dim, rot_dim", KERNEL_CASES)
def test_kernel_matches_ref_on_cuda(dtype, ratio, head_dim, rot_dim):
    check_kernel(dtype, ratio, head_dim, rot_dim, "cuda")


# each sequence's first blocks in the host tier: all of a context's full blocks, some, none, a straddled page
HOST_COUNTS = [18, 1, 1, 5, 0, 1, 0]


@interpreted
@pytest.mark.parametrize("ratio", [4, 3])
def test_kernel_reads_keys_of_the_host_tier_interpreted(ratio):
    """KV beyond VRAM: with sequences' first blocks of keys only in the host tier (NaN on the device) the
    kernel's scores equal the all-resident ref's."""
    check_kernel(torch.float32, ratio, 40, 16, "cpu", HOST_COUNTS)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_reads_keys_of_the_host_tier_on_cuda(dtype):
    check_kernel(dtype, 3, 128, 64, "cuda", HOST_COUNTS)
