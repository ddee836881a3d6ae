"""Microbenchmarks of the Triton kernels at decode/verify shapes: achieved memory bandwidth (the fewest
bytes each call must move, over its time) against a large device-to-device copy timed in the same run.

Shapes: random:qwen3-30b-a3b (hidden 2048, 128 experts top-8, moe_intermediate 768; 32 heads / 4 KV heads,
head_dim 128) and Qwen3-Next's Gated DeltaNet (Hk 16, Hv 32, Dk = Dv = 128, conv width 4). Each timed
unit is a CUDA graph replaying one call per input set, rotating over enough sets (other layers' weights,
other blocks, other state rows) that the data does not sit in L2. Run: strata bench kernels [--only …]
[--no-sweep] [--out FILE]. Needs CUDA and Triton: the CLI checks both before importing this module.
"""

from __future__ import annotations

import json
import sys

import torch
import triton

from strata.kernels.fused_moe import default_config, fused_moe, fused_moe_ref, moe_align, moe_grouped_gemms
from strata.kernels.gdn import causal_conv1d_update, gdn_recurrent
from strata.kernels.paged_attention import num_splits_for, paged_attention, paged_attention_ref

ROTATE_BYTES = 512 * 2 ** 20   # data touched per timed graph, about 10x the H200's L2


def median_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def per_call_seconds(calls) -> float:
    """Time of one call, from a CUDA graph that runs each of `calls` once (as the engine's decode graphs
    will: no launch gaps)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:            # compile and warm the allocator outside the capture
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return median_ms(graph.replay) * 1e-3 / len(calls)


def rotations(bytes_per_call: float, limit: int) -> int:
    return int(max(2, min(limit, -(-ROTATE_BYTES // max(1, int(bytes_per_call))))))


def copy_bandwidth(num_bytes: int = 2 ** 31) -> float:
    src = torch.randint(0, 255, (num_bytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = median_ms(lambda: dst.copy_(src)) * 1e-3
    return 2 * num_bytes / seconds            # bytes read + bytes written


def bench_moe(layers: int, tokens: list[int], sweep_tokens: list[int]) -> list[dict]:
    num_experts, top_k, dim, inter = 128, 8, 2048, 768
    w13 = torch.randn(layers, num_experts, 2 * inter, dim, device="cuda", dtype=torch.bfloat16) * dim ** -0.5
    w2 = torch.randn(layers, num_experts, dim, inter, device="cuda", dtype=torch.bfloat16) * inter ** -0.5
    expert_bytes = 3 * inter * dim * 2
    rows = []
    for num_tokens in tokens:
        hidden = torch.randn(layers, num_tokens, dim, device="cuda", dtype=torch.bfloat16)
        ids = torch.rand(layers, num_tokens, num_experts, device="cuda").topk(top_k, dim=-1).indices
        weights = torch.rand(layers, num_tokens, top_k, device="cuda").softmax(-1).to(torch.bfloat16)
        touched = sum(ids[layer].unique().numel() for layer in range(layers)) / layers
        nbytes = touched * expert_bytes + 2 * num_tokens * dim * 2 + num_tokens * top_k * 12
        config = default_config(num_tokens * top_k, num_experts)
        calls = [lambda layer=layer: fused_moe(hidden[layer], w13[layer], w2[layer], ids[layer], weights[layer])
                 for layer in range(layers)]
        seconds = per_call_seconds(calls)
        rows.append(dict(kernel="fused_moe", tokens=num_tokens, experts_touched=touched, config=config,
                         us=seconds * 1e6, bytes=nbytes, bandwidth=nbytes / seconds))
        layouts = [moe_align(ids[layer], num_experts, config["BLOCK_M"]) for layer in range(layers)]
        calls = [lambda layer=layer: moe_grouped_gemms(hidden[layer], w13[layer], w2[layer], weights[layer],
                                                       *layouts[layer], config) for layer in range(layers)]
        seconds = per_call_seconds(calls)
        rows.append(dict(kernel="moe_gemms_only", tokens=num_tokens, experts_touched=touched, config=config,
                         us=seconds * 1e6, bytes=nbytes, bandwidth=nbytes / seconds))
        if num_tokens in sweep_tokens:   # other tiles for the GEMMs, each checked against the ref
            expected = fused_moe_ref(hidden[0].float(), w13[0].float(), w2[0].float(), ids[0], weights[0].float())
            for n, k, warps, stages, n_down in [(32, 128, 4, 4, 32), (16, 128, 4, 4, 16), (32, 256, 4, 3, 32),
                                                (32, 128, 4, 4, 64), (64, 128, 4, 4, 64), (32, 64, 4, 6, 32),
                                                (16, 256, 2, 4, 32)]:
                cfg = dict(BLOCK_M=16, BLOCK_N=n, BLOCK_K=k, num_warps=warps, num_stages=stages, BLOCK_N_DOWN=n_down)
                out = moe_grouped_gemms(hidden[0], w13[0], w2[0], weights[0], *layouts[0], cfg)
                err = ((out.float() - expected).norm() / expected.norm()).item()
                calls = [lambda layer=layer, cfg=cfg: moe_grouped_gemms(hidden[layer], w13[layer], w2[layer],
                                                                        weights[layer], *layouts[layer], cfg)
                         for layer in range(layers)]
                seconds = per_call_seconds(calls)
                rows.append(dict(kernel="moe_gemms_sweep", tokens=num_tokens, experts_touched=touched, config=cfg,
                                 rel_err=err, us=seconds * 1e6, bytes=nbytes, bandwidth=nbytes / seconds))
        if num_tokens in (1, 8):   # the torch path the kernel replaces (host syncs: eager, one layer)
            seconds = median_ms(lambda: fused_moe_ref(hidden[0], w13[0], w2[0], ids[0], weights[0])) * 1e-3
            rows.append(dict(kernel="moe_torch_ref", tokens=num_tokens, experts_touched=touched, us=seconds * 1e6,
                             bytes=nbytes, bandwidth=nbytes / seconds))
    return rows


# (name, output columns, input depth): qwen3-30b-a3b's attention and router, qwen3-next-80b's delta-rule
# input and output projections
LINEAR_SHAPES = [("qkv_proj", 5120, 2048), ("o_proj", 2048, 4096), ("router", 128, 2048),
                 ("in_proj_qkvz", 12288, 2048), ("gdn_out_proj", 2048, 4096)]


def bench_linear(rows_list: list[int]) -> list[dict]:
    """The dense projections of a decode step as torch runs them (cuBLAS), over enough weight copies to
    leave L2 cold: what the attention and router projections cost against their bytes."""
    rows = []
    for name, cols, depth in LINEAR_SHAPES:
        nbytes_w = cols * depth * 2
        weights = [torch.randn(cols, depth, device="cuda", dtype=torch.bfloat16)
                   for _ in range(rotations(nbytes_w, 64))]
        for num_rows in rows_list:
            x = torch.randn(num_rows, depth, device="cuda", dtype=torch.bfloat16)
            nbytes = nbytes_w + num_rows * (cols + depth) * 2
            seconds = per_call_seconds([lambda w=w: torch.nn.functional.linear(x, w) for w in weights])
            rows.append(dict(kernel="linear_cublas", shape=name, rows=num_rows, us=seconds * 1e6, bytes=nbytes,
                             bandwidth=nbytes / seconds))
        del weights
    return rows


def bench_packed(rows_list: list[int], sweep: bool) -> list[dict]:
    """One- and few-row projections over packed GGUF blocks (packed_gemv) beside the bf16 Triton path
    (skinny_linear) at the same shapes, cold L2: bandwidth counts the bytes each reads (packed or bf16)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from strata.kernels.packed_gemv import BLOCK_LAYOUT, packed_gemv
    from strata.kernels.skinny_linear import skinny_linear

    configs = [dict(BLOCK_N=n, SUPERBLOCKS=sb, num_warps=w) for n in (2, 4, 8) for sb in (1, 2, 4) for w in (2, 4)] \
        if sweep else [None]
    rows = []
    for name, cols, depth in LINEAR_SHAPES:
        dense = [torch.randn(cols, depth, device="cuda", dtype=torch.bfloat16)
                 for _ in range(rotations(cols * depth * 2, 64))]
        for num_rows in rows_list:
            x = torch.randn(num_rows, depth, device="cuda", dtype=torch.bfloat16)
            seconds = per_call_seconds([lambda w=w: skinny_linear(x, w) for w in dense])
            nbytes = cols * depth * 2
            rows.append(dict(kernel="linear_bf16_skinny", shape=name, rows=num_rows, us=seconds * 1e6,
                             bytes=nbytes, bandwidth=nbytes / seconds))
        for qtype in BLOCK_LAYOUT:
            per_block, block_bytes = GGML_QUANT_SIZES[qtype]
            row_bytes = depth // per_block * block_bytes
            # random bytes: the speed does not depend on the values (f16 scales may be NaN; unread)
            packed = [torch.randint(0, 256, (cols, row_bytes), device="cuda", dtype=torch.uint8)
                      for _ in range(rotations(cols * row_bytes, 64))]
            for num_rows in rows_list:
                x = torch.randn(num_rows, depth, device="cuda", dtype=torch.bfloat16)
                for config in configs:
                    seconds = per_call_seconds([lambda w=w: packed_gemv(x, w, qtype, cols, depth, config)
                                                for w in packed])
                    rows.append(dict(kernel=f"packed_gemv_{GGMLQuantizationType(qtype).name.lower()}", shape=name, rows=num_rows, config=config,
                                     us=seconds * 1e6, bytes=cols * row_bytes,
                                     bandwidth=cols * row_bytes / seconds))
            del packed
        del dense
    return rows


def bench_attention(cases: list[tuple], sweep: bool) -> list[dict]:
    num_heads, num_kv_heads, head_dim, block_size = 32, 4, 128, 16
    num_blocks = 65536     # 1 GiB each for K and V
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    rows = []
    for num_seqs, context, query_len, *table in cases:   # table: the block-table width the splits are sized by
        table_blocks = max(table + [-(-context // block_size)])
        kv_bytes = num_seqs * context * num_kv_heads * head_dim * 2 * 2
        nbytes = kv_bytes + 2 * num_seqs * query_len * num_heads * head_dim * 2
        sets = rotations(nbytes, 64)
        blocks_per_seq = -(-context // block_size)
        problems = []
        for _ in range(sets):
            table = torch.randperm(num_blocks, device="cuda")[:num_seqs * blocks_per_seq].view(num_seqs, -1)
            q = torch.randn(num_seqs * query_len, num_heads, head_dim, device="cuda", dtype=torch.bfloat16)
            seq_lens = torch.full((num_seqs,), context, device="cuda")
            qsl = torch.arange(num_seqs + 1, device="cuda") * query_len
            problems.append((q, table, seq_lens, qsl))
        q, table, seq_lens, qsl = problems[0]
        expected = paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), table, seq_lens, qsl,
                                       head_dim ** -0.5)
        variants = [(8, 64, 2)] + ([(2, 64, 2), (4, 64, 2), (4, 64, 3), (4, 32, 3)] if sweep else [])
        for per_sm, block_n, stages in variants:   # (programs per SM, BLOCK_N, num_stages); the first is the default
            splits = num_splits_for(num_seqs, num_kv_heads, table_blocks, block_size, block_n,
                                    triton.next_power_of_2(query_len), k_cache.device, per_sm)

            def call(p, splits=splits, block_n=block_n, stages=stages):
                return paged_attention(p[0], k_cache, v_cache, p[1], p[2], p[3], head_dim ** -0.5,
                                       max_query_len=query_len, num_splits=splits, block_n=block_n, num_stages=stages)

            err = ((call(problems[0]).float() - expected).norm() / expected.norm()).item()
            seconds = per_call_seconds([lambda p=p: call(p) for p in problems])
            rows.append(dict(kernel="paged_attention", seqs=num_seqs, context=context, query_len=query_len,
                             table_blocks=table_blocks,
                             per_sm=per_sm, block_n=block_n, stages=stages, splits=splits, rel_err=err,
                             us=seconds * 1e6, bytes=nbytes, bandwidth=nbytes / seconds))
    return rows


def bench_gdn(cases: list[tuple[int, int, bool]], sweep: bool) -> list[dict]:
    num_k_heads, num_v_heads, dim = 16, 32, 128
    max_slots = 512
    state_bytes = num_v_heads * dim * dim * 4
    pool = torch.randn(max_slots, num_v_heads, dim, dim, device="cuda") * 0.01
    rows = []
    for num_seqs, query_len, keep_all in cases:
        num_tokens = num_seqs * query_len
        nbytes = (2 * num_seqs + (num_tokens if keep_all else 0)) * state_bytes \
            + num_tokens * (2 * num_k_heads * dim + 2 * num_v_heads * dim) * 2 + num_tokens * num_v_heads * 8
        sets = min(rotations(nbytes, 64), max_slots // num_seqs)
        problems = []
        for s in range(sets):
            q = torch.nn.functional.normalize(torch.randn(num_tokens, num_k_heads, dim, device="cuda"), dim=-1)
            k = torch.nn.functional.normalize(torch.randn(num_tokens, num_k_heads, dim, device="cuda"), dim=-1)
            v = torch.randn(num_tokens, num_v_heads, dim, device="cuda")
            g = -torch.rand(num_tokens, num_v_heads, device="cuda")
            beta = torch.rand(num_tokens, num_v_heads, device="cuda")
            slots = torch.arange(s * num_seqs, (s + 1) * num_seqs, device="cuda")
            qsl = torch.arange(num_seqs + 1, device="cuda") * query_len
            has_init = torch.ones(num_seqs, dtype=torch.bool, device="cuda")
            problems.append((q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta, slots, qsl, has_init))
        # the first is the default tiling; the sweep is session 67's grid (bench/results/2026-12-07-h100-session67/)
        grid = [(bv, w) for bv in (8, 16, 32) for w in (1, 2, 4) if (bv, w) != (32, 2)]
        variants = [(32, 2)] + (grid if sweep else [])
        for block_v, warps in variants:
            calls = [lambda p=p, b=block_v, w=warps: gdn_recurrent(*p[:5], pool, *p[5:], keep_all_states=keep_all,
                                                                   block_v=b, num_warps=w) for p in problems]
            seconds = per_call_seconds(calls)
            rows.append(dict(kernel="gdn_recurrent", seqs=num_seqs, query_len=query_len, all_states=keep_all,
                             block_v=block_v, num_warps=warps, us=seconds * 1e6, bytes=nbytes,
                             bandwidth=nbytes / seconds))
    return rows


def bench_conv(cases: list[tuple[int, int]]) -> list[dict]:
    channels, width, max_slots = 2 * 16 * 128 + 32 * 128, 4, 512
    conv_state = torch.randn(max_slots, channels, width - 1, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(channels, width, device="cuda", dtype=torch.bfloat16)
    rows = []
    for num_seqs, query_len in cases:
        num_tokens = num_seqs * query_len
        nbytes = 2 * num_seqs * channels * (width - 1) * 2 + 2 * num_tokens * channels * 2 + channels * width * 2
        problems = [(torch.randn(num_tokens, channels, device="cuda", dtype=torch.bfloat16),
                     torch.arange(s * num_seqs, (s + 1) * num_seqs, device="cuda"),
                     torch.arange(num_seqs + 1, device="cuda") * query_len,
                     torch.ones(num_seqs, dtype=torch.bool, device="cuda")) for s in range(8)]
        calls = [lambda p=p: causal_conv1d_update(p[0], weight, conv_state, p[1], p[2], p[3], silu=True)
                 for p in problems]
        seconds = per_call_seconds(calls)
        rows.append(dict(kernel="causal_conv1d_update", seqs=num_seqs, query_len=query_len, us=seconds * 1e6,
                         bytes=nbytes, bandwidth=nbytes / seconds))
    return rows


def bench_kernels(only: set[str], sweep: bool) -> tuple[float, list[dict]]:
    """-> (device copy bandwidth, bytes per second; one row per kernel call shape and config)."""
    torch.manual_seed(0)
    copy = copy_bandwidth()
    rows = [dict(kernel="device_copy", bytes=2 * 2 ** 31, bandwidth=copy)]
    if "moe" in only:
        rows += bench_moe(layers=8, tokens=[1, 2, 4, 8, 16, 32, 64], sweep_tokens=[1, 8] if sweep else [])
        torch.cuda.empty_cache()
    if "linear" in only:
        rows += bench_linear([1, 16])
        torch.cuda.empty_cache()
    if "packed" in only:
        rows += bench_packed([1, 4], sweep)
        torch.cuda.empty_cache()
    if "attention" in only:
        rows += bench_attention([(1, 128, 1, 256), (8, 128, 1, 256), (1, 4096, 1), (1, 32768, 1), (8, 4096, 1),
                                 (32, 4096, 1), (64, 2048, 1), (8, 4096, 4), (32, 2048, 4), (8, 1024, 16)], sweep)
        torch.cuda.empty_cache()
    if "gdn" in only:
        rows += bench_gdn([(1, 1, False), (8, 1, False), (32, 1, False), (1, 4, True), (4, 4, True), (8, 4, True),
                           (16, 4, True), (32, 4, True), (1, 64, False), (1, 256, False)], sweep)
        rows += bench_conv([(1, 1), (8, 1), (32, 1), (8, 4)])
    return copy, rows


def print_rows(copy: float, rows: list[dict]) -> None:
    print(f"{'kernel':<22}{'shape':<44}{'us':>9}{'MB':>9}{'GB/s':>8}{'% copy':>8}")
    for row in rows:
        shape = ", ".join(f"{k}={v:.1e}" if k == "rel_err" else f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in row.items()
                          if k not in ("kernel", "us", "bytes", "bandwidth") and not isinstance(v, dict))
        if isinstance(row.get("config"), dict):
            c = row["config"]
            shape += ", cfg=" + "/".join(str(v) for v in c.values())
        print(f"{row['kernel']:<22}{shape:<44}{row.get('us', 0):>9.1f}{row['bytes'] / 1e6:>9.2f}"
              f"{row['bandwidth'] / 1e9:>8.0f}{100 * row['bandwidth'] / copy:>7.1f}%")


def run(only: set[str], sweep: bool, out: str | None) -> None:
    copy, rows = bench_kernels(only, sweep)
    print_rows(copy, rows)
    if out:
        with open(out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), copy_bandwidth=copy, rows=rows), f, indent=1)


if __name__ == "__main__":   # the options live in one place: `strata bench kernels`
    from strata.cli.main import main

    sys.exit(main(["bench", "kernels", *sys.argv[1:]]))
