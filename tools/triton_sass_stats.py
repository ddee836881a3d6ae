"""packed_q8's kernels compiled for sm_90 on a machine without a GPU: registers, stack, local memory and the SASS
opcode histogram of one tiling, to compare kernel variants by their instructions before a device run (session 51:
the pairs' K steps with a group's words in a loop, ISUM=2). Needs triton with its bundled ptxas, cuobjdump and
nvdisasm (`pip install --target /tmp/tri36 triton==3.6.0`).

usage: PYTHONPATH=/tmp/tri36:. python tools/triton_sass_stats.py pairs gate_up|down BLOCK_N SUPERBLOCKS WARPS ISUM [QTYPE]
       PYTHONPATH=/tmp/tri36:. python tools/triton_sass_stats.py gemv QTYPE ROWS BLOCK_N SUPERBLOCKS WARPS ISUM
       PYTHONPATH=/tmp/tri36:. python tools/triton_sass_stats.py grouped gate_up|down QTYPE BLOCK_M BLOCK_N WARPS
The pairs are the 30B-A3B's experts (Q4_K gate/up rows of 2,048, Q6_K down rows of 768, or QTYPE); the GEMV is
4,096 x 2,048; the grouped kernels are packed_moe's float ones (prompts of i-quant experts) on the same experts.
Integer arguments are specialized on those values as a launch would be (divisible by 16 or not).
Add --sass FILE to keep the disassembly."""
import argparse
import collections
import os
import re
import signal
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from strata.kernels import packed_q8

POINTERS = {"q_ptr": "*i8", "dx_ptr": "*fp32", "sums_ptr": "*fp32", "w_ptr": "*u8", "w13_ptr": "*u8", "w2_ptr": "*u8",
            "table_ptr": "*u8", "ids_ptr": "*i32", "act_ptr": "*fp32", "weights_ptr": "*fp32", "out_ptr": "*fp32",
            "hidden_ptr": "*bf16", "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32"}


def compile_sm90(fn, consts: dict, values: dict, pointers: dict = POINTERS, **options):
    """`fn` compiled for sm_90 with `pointers`' argument types (pointers, or scalars such as "fp32"; the rest i32)
    and these constexprs, specialized as a launch would be: pointers 16-byte aligned, and the integers of `values`
    divisible by 16 marked so (a launch's specialization; without it no load is vectorized). Integers not in
    `values` are taken as not divisible."""
    signature = {a: "constexpr" if a in consts else pointers.get(a, "i32") for a in fn.arg_names}
    aligned = [a for a in fn.arg_names if a not in consts
               and (signature[a].startswith("*") or (a in values and values[a] % 16 == 0))]
    src = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()},
                    attrs={(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def nvidia_tool(name: str, *args: str) -> str:
    path = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin", name)
    return subprocess.run([path, *args], capture_output=True, text=True, check=True).stdout


def main() -> None:  # noqa: C901 (one branch a kernel family)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", choices=["pairs", "gemv", "grouped"])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--sass", help="write the disassembly here")
    opts = parser.parse_args()
    if opts.kernel == "pairs":
        which, (bn, sb, warps, isum) = opts.args[0], (int(v) for v in opts.args[1:5])
        qtype, k = (12, 2048) if which == "gate_up" else (14, 768)
        qtype = int(opts.args[5]) if len(opts.args) > 5 else qtype
        fn = packed_q8._gate_up_kernel if which == "gate_up" else packed_q8._down_kernel
        consts = dict(QTYPE=qtype, BLOCK_N=bn, SB=packed_q8.units_per_step(sb, qtype, k), UNIT=packed_q8.UNIT[qtype],
                      WT=packed_q8.word_tiles(qtype, isum > 0), ISUM=isum, USE_PDL=True, ASM=True)
        rows_out, row_bytes = (2 * 768, packed_q8.row_bytes(qtype, k)) if which == "gate_up" else (
            2048, packed_q8.row_bytes(qtype, k))
        values = dict(inter=768, dim=2048, top_k=8, stride_we=rows_out * row_bytes, stride_wn=row_bytes,
                      num_pairs=512)
    elif opts.kernel == "grouped":
        from strata.kernels import packed_moe

        which, (qtype, bm, bn, warps) = opts.args[0], (int(v) for v in opts.args[1:5])
        k = 2048 if which == "gate_up" else 768
        row_bytes = packed_q8.row_bytes(qtype, k)
        consts = dict(QTYPE=qtype, BLOCK_M=bm, BLOCK_N=bn, USE_PDL=True)
        if which == "gate_up":
            fn = packed_moe._gate_up_grouped_kernel
            values = dict(inter=768, dim=2048, top_k=8, stride_ht=2048, stride_we=1536 * row_bytes,
                          stride_wn=row_bytes, stride_at=768)
        else:
            fn = packed_moe._down_grouped_kernel
            values = dict(dim=2048, inter=768, stride_at=768, stride_we=2048 * row_bytes, stride_wn=row_bytes)
        values["num_pairs"] = 512
        pointers = {**POINTERS, "act_ptr": "*bf16"}
    else:
        qtype, rows, bn, sb, warps, isum = (int(v) for v in opts.args[:6])
        fn, k = packed_q8._gemv_kernel, 2048
        values = dict(n=4096, k=k, num_rows=rows, stride_wn=packed_q8.row_bytes(qtype, k), stride_om=4096)
        consts = dict(QTYPE=qtype, BLOCK_N=bn, SB=packed_q8.units_per_step(sb, qtype, k), ROWS=rows,
                      UNIT=packed_q8.UNIT[qtype], WT=packed_q8.word_tiles(qtype, isum > 0), ISUM=isum, USE_PDL=True,
                      ASM=True)
    grouped = opts.kernel == "grouped"
    kernel = compile_sm90(fn, consts, values, pointers if grouped else POINTERS, num_warps=warps,
                          num_stages=2 if grouped else 3)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = nvidia_tool("cuobjdump", "--dump-resource-usage", cubin.name)
        sass = nvidia_tool("nvdisasm", "-c", cubin.name)
    ops = [m.group(2) for m in (re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
                                for line in sass.splitlines()) if m]
    found = re.search(r"REG:(\d+).*?STACK:(\d+).*?LOCAL:(\d+)", usage, re.S)
    print(opts.kernel, " ".join(opts.args), "registers %s stack %s local %s" % found.groups(), "instructions", len(ops))
    counts = collections.Counter(op.split(".")[0] for op in ops)
    print(" ".join(f"{op}:{n}" for op, n in counts.most_common(24)))
    if opts.sass:
        open(opts.sass, "w").write(sass)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    main()
