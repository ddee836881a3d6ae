"""Compile Strata's packed-block Triton kernels to Triton IR for an sm_90 target on a machine without a
GPU: catches front-end errors (shapes, types, returns) that TRITON_INTERPRET=1 lets through. Needs triton
(e.g. `pip install --target /tmp/trisite triton==3.5.0`): `PYTHONPATH=/tmp/trisite:. python tools/triton_ir_check.py`.
With --full, also the float packed kernels (gemv, dequant, MoE pairs and grouped) and the 8-bit-activation ones
(packed_q8) of every type through the whole NVIDIA pipeline to a cubin (triton's bundled ptxas; several minutes):
catches errors of layout lowering."""
import sys
import triton
import triton._C.libtriton as lt
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from strata.kernels import hyper, ple, rms_norm, routing
from strata.kernels import (packed_dequant, packed_gemv, packed_gemv_words, packed_mmq, packed_moe, packed_q8,
                            packed_q8_joined, q8_rounding)

TARGET = GPUTarget("cuda", 90, 32)
PTR = {"x_ptr": "*bf16", "hidden_ptr": "*bf16", "act_ptr": "*bf16", "out_ptr": "*fp32", "weights_ptr": "*fp32",
       "ids_ptr": "*i32", "q_ptr": "*i8", "table_ptr": "*i8", "table_a_ptr": "*i8", "table_b_ptr": "*i8", "dx_ptr": "*fp32", "sums_ptr": "*fp32",
       "words_ptr": "*i32", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32"}


def check(fn, consts: dict, name: str, ptr: dict | None = None) -> bool:
    types = {**PTR, **(ptr or {})}
    sig = {a: ("constexpr" if a in consts else types.get(a, "*u8") if a.endswith("_ptr") else
               "fp32" if a in ("eps", "inv_sqrt_dim") else "i32") for a in fn.arg_names}
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
        backend = make_backend(TARGET)
        options = backend.parse_options({})
        ctx = lt.ir.context()
        lt.ir.load_dialects(ctx)
        backend.load_dialects(ctx)
        src.make_ir(TARGET, options, backend.get_codegen_implementation(options), backend.get_module_map(), ctx)
        print("ok  ", name)
        return True
    except Exception as e:  # noqa: BLE001
        print("FAIL", name, type(e).__name__, str(e)[-1200:])
        return False


def compile_to_cubin(fn, consts: dict, name: str, options: dict) -> bool:
    """triton.compile for TARGET, pointers 16-byte aligned as Triton specializes them at run time."""
    sig = {a: "constexpr" if a in consts else PTR.get(a, "*u8") if a.endswith("_ptr") else "i32" for a in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a.endswith("_ptr")}
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()},
                        attrs=aligned)
        kernel = triton.compile(src, target=TARGET, options=options)
        print("ok  ", name, "cubin", len(kernel.asm["cubin"]), "bytes")
        return True
    except Exception as e:  # noqa: BLE001
        print("FAIL", name, type(e).__name__, str(e)[-1200:])
        return False


ok = True
if "--full" in sys.argv:
    for q in sorted(packed_gemv.BLOCK_LAYOUT):
        for fn, consts, options in (
                (packed_gemv._packed_gemv_kernel, dict(QTYPE=q, BLOCK_N=4, SB=4, USE_PDL=True, ACC=False),
                 dict(num_warps=2, num_stages=3)),
                (packed_dequant._dequantize_kernel, dict(QTYPE=q, BLOCK_N=8, SB=2), dict(num_warps=4)),
                (packed_moe._gate_up_pairs_kernel, dict(QTYPE=q, BLOCK_N=4, SB=4, USE_PDL=True),
                 dict(num_warps=2, num_stages=3)),
                (packed_moe._down_pairs_kernel, dict(QTYPE=q, BLOCK_N=4, SB=4, USE_PDL=True),
                 dict(num_warps=2, num_stages=3)),
                (packed_moe._gate_up_grouped_kernel, dict(QTYPE=q, BLOCK_M=16, BLOCK_N=32, USE_PDL=True),
                 dict(num_warps=4, num_stages=2)),
                (packed_moe._down_grouped_kernel, dict(QTYPE=q, BLOCK_M=64, BLOCK_N=32, USE_PDL=True),
                 dict(num_warps=4, num_stages=2))):
            ok &= compile_to_cubin(fn, consts, f"full {fn.fn.__name__} q{q}", options)
    for q in sorted(packed_q8.UNIT):  # the 8-bit-activation kernels, as packed_gemv_q8 and moe_pairs_q8 launch them
        wt = packed_q8.word_tiles(q, False)
        for fn, consts, options in (
                (packed_q8._gemv_kernel, dict(QTYPE=q, BLOCK_N=2, SB=2, ROWS=1, UNIT=packed_q8.UNIT[q], WT=wt,
                                              USE_PDL=True, ASM=True), dict(num_warps=1, num_stages=3)),
                (packed_q8._gemv_kernel, dict(QTYPE=q, BLOCK_N=4, SB=1, ROWS=8, UNIT=packed_q8.UNIT[q],
                                              WT=packed_q8.word_tiles(q, True), USE_PDL=True, ASM=True),
                 dict(num_warps=1, num_stages=3)),
                (packed_q8._gate_up_kernel, dict(QTYPE=q, BLOCK_N=16, SB=2, UNIT=packed_q8.UNIT[q], WT=wt, USE_PDL=True,
                                                 ASM=True), dict(num_warps=1, num_stages=3)),
                (packed_q8._down_kernel, dict(QTYPE=q, BLOCK_N=16, SB=2, UNIT=packed_q8.UNIT[q], WT=wt, USE_PDL=True,
                                              ASM=True), dict(num_warps=1, num_stages=3))):
            ok &= compile_to_cubin(fn, consts, f"full q8 {fn.fn.__module__.split('.')[-1]} {fn.fn.__name__} q{q}",
                                   options)
    for qa, qb in ((12, 14), (13, 8), (18, 12)):  # packed_q8_joined: Q4_K + Q6_K, Q5_K + Q8_0, IQ3_XXS + Q4_K
        for rows, bn, warps in ((1, 2, 1), (8, 4, 2)):
            joined = dict(QTYPE_A=qa, QTYPE_B=qb, BLOCK_N=bn, SB_A=2, SB_B=2, UNIT_A=packed_q8.UNIT[qa],
                          UNIT_B=packed_q8.UNIT[qb], ROWS=rows, WT_A=packed_q8.word_tiles(qa, rows > 1),
                          WT_B=packed_q8.word_tiles(qb, rows > 1), ISUM=int(rows > 1), USE_PDL=True, ASM=True)
            ok &= compile_to_cubin(packed_q8_joined._gemv_joined_kernel, joined,
                                   f"full q8 joined q{qa}+q{qb} rows {rows}", dict(num_warps=warps, num_stages=3))
for q in sorted(packed_gemv.BLOCK_LAYOUT):
    for sb in (1, 2):
        for acc in (False, True):
            ok &= check(packed_gemv._packed_gemv_kernel, dict(QTYPE=q, BLOCK_N=4, SB=sb, USE_PDL=False, ACC=acc),
                        f"gemv q{q} sb{sb} acc={acc}")
        ok &= check(packed_dequant._dequantize_kernel, dict(QTYPE=q, BLOCK_N=8, SB=sb), f"dequant q{q} sb{sb}")
        for k in (packed_moe._gate_up_pairs_kernel, packed_moe._down_pairs_kernel):
            ok &= check(k, dict(QTYPE=q, BLOCK_N=16, SB=sb, USE_PDL=False), f"{k.fn.__name__} q{q} sb{sb}")
    for k in (packed_moe._gate_up_grouped_kernel, packed_moe._down_grouped_kernel):
        ok &= check(k, dict(QTYPE=q, BLOCK_M=16, BLOCK_N=32, USE_PDL=False), f"{k.fn.__name__} q{q}")
for q in sorted(packed_gemv_words.SUPERBLOCK_BYTES):
    for asm in (False, True):
        ok &= check(packed_gemv_words._words_gemv_kernel, dict(QTYPE=q, BLOCK_N=8, SB=2, USE_PDL=False, ASM=asm),
                    f"words gemv q{q} asm={asm}")
for q in sorted(packed_q8.UNIT):
    for asm in (False, True):
        for rows in (1, 4):
            ok &= check(packed_q8._gemv_kernel, dict(QTYPE=q, BLOCK_N=4, SB=2, ROWS=rows, UNIT=packed_q8.UNIT[q], WT=packed_q8.word_tiles(q, rows > 1),
                             USE_PDL=True, ASM=asm),
                        f"q8 gemv q{q} rows{rows} asm={asm}")
        for k in (packed_q8._gate_up_kernel, packed_q8._down_kernel):
            ok &= check(k, dict(QTYPE=q, BLOCK_N=4, SB=1, UNIT=packed_q8.UNIT[q], WT=packed_q8.word_tiles(q, False), USE_PDL=True,
                             ASM=asm), f"q8 {k.fn.__name__} q{q} asm={asm}")
ok &= check(q8_rounding._quantize_kernel, dict(USE_PDL=True), "q8 quantize")
for q in (packed_mmq.Q4_K, packed_mmq.Q6_K):
    for k in (packed_mmq._gate_up_kernel, packed_mmq._down_kernel):
        ok &= check(k, dict(QTYPE=q, BLOCK_M=16, BLOCK_N=64, USE_PDL=True), f"mmq {k.fn.__name__} q{q}")
BF16_PTRS = {"res_ptr": "*bf16", "shared_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "res_out_ptr": "*bf16",
             "gate_ptr": "*bf16", "streams_ptr": "*bf16", "weights_ptr": "*bf16", "partials_ptr": "*fp32"}
for top_k, quantize, block_d, gated in ((0, True, 2048, False), (4, True, 4096, False), (0, False, 2048, False),
                                        (10, True, 2048, True)):
    ok &= check(rms_norm._rms_norm_kernel, dict(HAS_RESIDUAL=True, ZERO_CENTERED=False, TOP_K=top_k, HAS_SHARED=gated,
                                              HAS_GATE=gated, QUANTIZE=quantize, BLOCK_D=block_d, USE_PDL=True),
                f"rms_norm top_k={top_k} quantize={quantize} gated={gated}",
                ptr={**BF16_PTRS, "x_ptr": "*fp32" if top_k else "*bf16"})
for gated in (False, True):
    ok &= check(hyper._topk_sum_inject_kernel, dict(TOP_K=10, HC=4, HAS_SHARED=True, HAS_GATE=gated, BLOCK=512,
                                                  USE_PDL=True), f"topk_sum_inject gated={gated}", ptr=BF16_PTRS)
for block_h, quantize in ((32, True), (4, True), (32, False)):
    ok &= check(rms_norm._gated_rms_norm_kernel, dict(SIGMOID=True, BLOCK_H=block_h, BLOCK_D=128, QUANTIZE=quantize,
                                                    USE_PDL=True), f"gated_rms_norm block_h={block_h} quantize={quantize}",
                ptr={**BF16_PTRS, "x_ptr": "*bf16"})
ROUTE_PTRS = {"hidden_ptr": "*bf16", "gate_ptr": "*bf16", "partial_ptr": "*fp32", "counter_ptr": "*i32", "ids_ptr": "*i64",
              "weights_ptr": "*bf16", "counts_ptr": "*i64", "touched_ptr": "*i64", "real_rows_ptr": "*i64",
              "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "scratch_ptr": "*i32"}
for tokens, experts, block_k, k_splits, layout in ((1, 128, 256, 8, False), (1, 512, 512, 2, True),
                                                   (4, 128, 256, 8, True), (4, 128, 256, 8, False)):
    ok &= check(routing._route_kernel, dict(TOP_K=8, RENORMALIZE=True, RECORD=True, MASK_ROWS=True, T_PAD=16,
                                            E_PAD=experts, K_PAD=8, TOK_CHUNK=1 if tokens == 1 else 4, BLOCK_E=16,
                                            BLOCK_K=block_k, K_SPLITS=k_splits, BLOCK_M=16, CHUNK=1024,
                                            ONE_CHUNK=tokens == 1, LAYOUT=layout, USE_PDL=True),
                f"route tokens={tokens} experts={experts} layout={layout}", ptr=ROUTE_PTRS)
PLE_PTRS = {"keys_ptr": "*bf16", "value_ptr": "*bf16", "streams_ptr": "*bf16", "wk_ptr": "*bf16", "wq_ptr": "*bf16",
            "wc_ptr": "*bf16", "gated_ptr": "*bf16", "normed_ptr": "*bf16", "w_ptr": "*bf16", "state_ptr": "*bf16",
            "window_ptr": "*bf16", "out_ptr": "*bf16", "slots_ptr": "*i64", "qsl_ptr": "*i32", "has_init_ptr": "*i1",
            "real_ptr": "*i32"}
for keep, real in ((False, False), (True, True)):
    ok &= check(ple._rows_kernel, dict(NGRAM=3, PER_NGRAM=8, HEADS_PAD=16, HIST_PAD=2, BLOCK_T=64, KEEP_WINDOW=keep,
                                       HAS_REAL=real, USE_PDL=True), f"ple rows keep={keep} real={real}",
                ptr={**PLE_PTRS, "ids_ptr": "*i64", "context_ptr": "*fp32", "mult_ptr": "*i64", "sizes_ptr": "*i64",
                     "offsets_ptr": "*i64", "rows_ptr": "*i64", "window_ptr": "*fp32"})
ok &= check(ple._gate_kernel, dict(HC=4, BLOCK_D=4096, USE_PDL=True), "ple gate", ptr=PLE_PTRS)
for keep, real in ((False, False), (True, False), (False, True)):
    ok &= check(ple._conv_kernel, dict(WIDTH=4, DILATION=3, HIST_PAD=16, KEEP_WINDOW=keep, HAS_REAL=real, BLOCK_C=256,
                                       USE_PDL=True), f"ple conv keep={keep} real={real}", ptr=PLE_PTRS)
sys.exit(0 if ok else 1)
