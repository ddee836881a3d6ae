"""Compile the attention-path Triton kernels (paged attention's split kernel, the fused qk-norm/rope/KV write)
to sm_90 cubin on a machine without a GPU, for every KV cache dtype (16-bit, fp8, int8 with scales) and
query dtype, with and without the fused merge (STRATA_FUSED_MERGE), the host KV tier (--kv-resident-tokens: a second cache read over PCIe) and QSA's block choice: catches front-end and lowering errors (types, shapes, a missing conversion) that
TRITON_INTERPRET=1 lets through, and prints each kernel's shared memory. Needs triton with its bundled ptxas
(e.g. `pip install --target /tmp/tri36 triton==3.6.0`): `PYTHONPATH=/tmp/tri36:. python
tools/triton_attention_check.py`."""
import sys

from triton_sass_stats import compile_sm90  # (this folder's)

from strata.kernels import paged_attention, qsa_scores, rope_kv

# (query dtype, KV cache dtype, scale pointer dtype): int8 caches carry float32 scales
CASES = [("bf16", "bf16", "bf16"), ("bf16", "fp8e4nv", "fp8e4nv"), ("bf16", "i8", "fp32"), ("fp32", "i8", "fp32")]
ITEMSIZE = {"bf16": 2, "fp8e4nv": 1, "i8": 1}


def check(fn, pointers: dict, consts: dict, name: str, **options) -> bool:
    """Compile `fn` with the given pointer / float argument types (the rest i32) and constexprs."""
    try:
        kernel = compile_sm90(fn, consts, {}, pointers, **options)
        print("ok  ", name, "shared", kernel.metadata.shared)
        return True
    except Exception as e:  # noqa: BLE001
        print("FAIL", name, type(e).__name__, str(e)[-1500:])
        return False


ok = True
for q, kv, scale in CASES:
    int8 = kv == "i8"
    attention = {"q_ptr": "*" + q, "k_ptr": "*" + kv, "v_ptr": "*" + kv, "ks_ptr": "*" + scale, "vs_ptr": "*" + scale,
                 "tables_ptr": "*i64", "seq_lens_ptr": "*i64", "qsl_ptr": "*i64", "partial_ptr": "*fp32",
                 "stats_ptr": "*fp32", "out_ptr": "*" + q, "qk_scale": "fp32", "hk_ptr": "*" + kv, "hv_ptr": "*" + kv,
                 "hks_ptr": "*" + scale, "hvs_ptr": "*" + scale, "host_tables_ptr": "*i64", "host_counts_ptr": "*i64",
                 "chosen_ptr": "*u8", "gate_ptr": "*" + q, "q8_ptr": "*i8", "dx_ptr": "*fp32", "sums_ptr": "*fp32",
                 "counters_ptr": "*i32"}
    for head_dim in (128, 256):
        block_n, stages = paged_attention.kv_tile_for(head_dim, ITEMSIZE[kv])
        for host, choice, gate, rounds, fused in ((False, False, False, False, False), (True, False, True, False, True),
                                                  (False, True, True, True, False), (True, True, False, True, True),
                                                  (False, False, True, True, True)):
            ok &= check(paged_attention._split_kernel, attention,
                        dict(KV_INT8=int8, HAS_HOST=host, HAS_CHOICE=choice, G_PAD=8, BLOCK_M=32, BLOCK_N=block_n,
                             BLOCK_D=head_dim, HAS_GATE=gate, ROUND=rounds, FUSED_MERGE=fused, USE_PDL=True),
                        f"paged attention q={q} kv={kv} D={head_dim} host={host} choice={choice} gate={gate} "
                        f"round={rounds} fused_merge={fused}", num_warps=4, num_stages=stages)
            ok &= check(paged_attention._merge_kernel, attention,
                        dict(BLOCK_N=block_n, SPLITS_PAD=64, BLOCK_D=head_dim, HAS_GATE=gate, ROUND=rounds, USE_PDL=True),
                        f"merge q={q} D={head_dim} gate={gate} round={rounds}", num_warps=4)
    rope = {"q_ptr": "*" + q, "k_ptr": "*" + q, "v_ptr": "*" + q, "qw_ptr": "*" + q, "kw_ptr": "*" + q,
            "cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i64", "kc_ptr": "*" + kv, "vc_ptr": "*" + kv,
            "ks_ptr": "*" + scale, "vs_ptr": "*" + scale, "slots_ptr": "*i64", "out_ptr": "*" + q,
            "cos_rows_ptr": "*fp32", "sin_rows_ptr": "*fp32", "eps": "fp32"}
    for norm, gather in ((True, 1), (False, 2)):
        ok &= check(rope_kv._qk_norm_rope_kv_kernel, rope,
                    dict(HAS_NORM=norm, ZERO_CENTERED=False, GATHER=gather, KV_INT8=int8, BLOCK_D=128, USE_PDL=True),
                    f"rope_kv q={q} kv={kv} norm={norm} gather={gather}", num_warps=1)
for dt in ("bf16", "fp32"):  # QSA's block scores (the index keys stay in the model dtype)
    scores = {"q_ptr": "*" + dt, "k_ptr": "*" + dt, "w_ptr": "*" + dt, "tables_ptr": "*i64", "seq_lens_ptr": "*i64",
              "qsl_ptr": "*i64", "cos_ptr": "*fp32", "sin_ptr": "*fp32", "out_ptr": "*fp32", "eps": "fp32",
              "sqrt_dim": "fp32", "hk_ptr": "*" + dt, "host_tables_ptr": "*i64", "host_counts_ptr": "*i64"}
    for host in (False, True):
        ok &= check(qsa_scores._block_scores_kernel, scores, dict(HAS_HOST=host, RATIO=4, HEADS_PAD=32, HALF_PAD=32,
                    REST_PAD=64, BLOCK_TILE=qsa_scores.BLOCK_TILE, USE_PDL=True), f"qsa block scores {dt} host={host}",
                    num_warps=4)
sys.exit(0 if ok else 1)
