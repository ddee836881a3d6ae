"""Registers and stack (spills) of the grouped MoE kernels for sm_90 over tilings, on a machine without a GPU:
compiles each to a cubin with triton's bundled ptxas and reads cuobjdump's resource usage.
`PYTHONPATH=/tmp/tri:. python tools/grouped_spills.py QTYPE MODULE:KERNEL[,MODULE:KERNEL...]`, e.g.
`12 packed_moe:_gate_up_grouped_kernel,packed_mmq:_down_kernel` (QTYPE 12 Q4_K, 13 Q5_K, 14 Q6_K; triton installed
under /tmp/tri). Optional third argument: tilings as BM/BN/WARPS,... (default 16/32/4,64/32/4,16/64/4,32/64/4)."""
import importlib
import os
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
TARGET = GPUTarget("cuda", 90, 32)
# pointer types by argument name; packed_mmq's activations are int8 with float32 scales and sums
PTR = {"hidden_ptr": "*bf16", "out_ptr": "*fp32", "weights_ptr": "*fp32", "sorted_ids_ptr": "*i32",
       "block_expert_ptr": "*i32", "q_ptr": "*i8", "dx_ptr": "*fp32", "sums_ptr": "*fp32"}


def usage(fn, consts, warps, stages=2, act="*bf16"):
    sig = {a: "constexpr" if a in consts else (act if a == "act_ptr" else PTR.get(a, "*u8")) if a.endswith("_ptr")
           else "i32" for a in fn.arg_names}
    # as on the device, which specializes integer arguments divisible by 16 (the strides, the widths)
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
               if a.endswith("_ptr") or a.startswith("stride") or a in ("dim", "inter")}
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
tilings = [tuple(int(v) for v in t.split("/")) for t in
           (sys.argv[3] if len(sys.argv) > 3 else "16/32/4,64/32/4,16/64/4,32/64/4").split(",")]
for spec in sys.argv[2].split(","):
    module_name, kernel = spec.split(":")
    fn = getattr(importlib.import_module(f"strata.kernels.{module_name}"), kernel)
    act = "*fp32" if module_name == "packed_mmq" else "*bf16"
    for bm, bn, warps in tilings:
        consts = dict(QTYPE=q, BLOCK_M=bm, BLOCK_N=bn, USE_PDL=True)
        if "SPLIT_K" in fn.arg_names:  # packed_mmq._linear_kernel: K in one program
            consts["SPLIT_K"] = 1
        print(module_name, kernel, "q", q, "bm", bm, "bn", bn, "w", warps, "|", usage(fn, consts, warps, act=act),
              flush=True)
