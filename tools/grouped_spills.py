"""Registers and stack (spills) of packed_moe's grouped kernels for sm_90 over tilings and the word decoder, on a
machine without a GPU: compiles each to a cubin with triton's bundled ptxas and reads cuobjdump's resource usage.
`PYTHONPATH=/tmp/tri:. python tools/grouped_spills.py QTYPE _gate_up_grouped_kernel,_down_grouped_kernel`
(QTYPE 12 Q4_K, 13 Q5_K, 14 Q6_K; triton installed under /tmp/tri)."""
import itertools
import os
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from strata.kernels import packed_moe
TARGET = GPUTarget("cuda", 90, 32)
PTR = {"hidden_ptr": "*bf16", "act_ptr": "*bf16", "out_ptr": "*fp32", "weights_ptr": "*fp32",
       "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32"}
def usage(fn, consts, warps, stages=2):
    sig = {a: "constexpr" if a in consts else PTR.get(a, "*u8") if a.endswith("_ptr") else "i32" for a in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a.endswith("_ptr")}
    constexprs = {(fn.arg_names.index(a),): v for a, v in consts.items()}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=aligned)
    k = triton.compile(src, target=TARGET, options=dict(num_warps=warps, num_stages=stages))
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True)
    line = [l for l in out.stdout.splitlines() if "REG" in l][0]
    return " ".join(line.split()[:3])
q = int(sys.argv[1])
for fn in [getattr(packed_moe, n) for n in sys.argv[2].split(",")]:
    for bm, bn, warps, words, parts in itertools.product((16, 64), (16, 32), (4, 8), (False, True), (1, 2)):
        if parts == 2 and not words:
            continue
        consts = dict(QTYPE=q, BLOCK_M=bm, BLOCK_N=bn, WORDS=words, PARTS=parts, ASM=True, USE_PDL=True)
        print(fn.fn.__name__[:8], "q", q, "bm", bm, "bn", bn, "w", warps, "words", int(words), "parts", parts, "|",
              usage(fn, consts, warps), flush=True)
