import os, subprocess, tempfile, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from strata.kernels import packed_q8, packed_q8_grouped
TARGET = GPUTarget("cuda", 90, 32)
PTR = {"act_ptr": "*fp32", "out_ptr": "*fp32", "weights_ptr": "*fp32", "q_ptr": "*i8", "table_ptr": "*i8",
       "dx_ptr": "*fp32", "sums_ptr": "*fp32", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "ids_ptr": "*i64"}
def usage(fn, consts, warps):
    sig = {a: "constexpr" if a in consts else PTR.get(a, "*u8") if a.endswith("_ptr") else "i32" for a in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
               if a.endswith("_ptr") or a.startswith("stride") or a in ("dim", "inter")}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()}, attrs=aligned)
    k = triton.compile(src, target=TARGET, options=dict(num_warps=warps, num_stages=3))
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    out = subprocess.run([os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"),
                          "--dump-resource-usage", f.name], capture_output=True, text=True)
    return " ".join([l for l in out.stdout.splitlines() if "REG" in l][0].split()[:3])
for q in (12, 14):
    for name, fn in (("pairs gate_up", packed_q8._gate_up_kernel), ("pairs down", packed_q8._down_kernel)):
        c = dict(QTYPE=q, BLOCK_N=16, SB=2, UNIT=256, WT=packed_q8._word_tiles(q, False), USE_PDL=True, ASM=True)
        print(name, q, "bn16 sb2 w1 |", usage(fn, c, 1), flush=True)
    for fn in (packed_q8_grouped._gate_up_grouped_kernel, packed_q8_grouped._down_grouped_kernel):
        for bm, bn, sb, w in ((2, 8, 1, 2), (4, 8, 1, 2), (8, 8, 1, 2), (4, 16, 1, 1), (8, 16, 1, 4), (16, 8, 1, 4)):
            c = dict(QTYPE=q, BLOCK_M=bm, BLOCK_N=bn, SB=sb, UNIT=256, WT=1, USE_PDL=True, ASM=True)
            print(fn.fn.__name__, q, f"bm{bm} bn{bn} sb{sb} w{w} |", usage(fn, c, w), flush=True)
