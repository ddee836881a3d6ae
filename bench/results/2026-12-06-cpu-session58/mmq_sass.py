"""sm_90 SASS of packed_mmq's grouped kernels (30B-A3B expert shapes, 16 x 64 tiles, 4 warps) at this tree against
an older packed_mmq.py (OLD_MMQ=path), compiled without a GPU (triton 3.6's ptxas); ASM_ON=1 turns the word unpack on.
usage: OLD_MMQ=old.py ASM_ON=0|1 PYTHONPATH=/tmp/tri36:. python mmq_sass.py"""
import os
import sys, tempfile, re, importlib.util
sys.argv = ["x"]
from tools.triton_sass_stats import compile_sm90, nvidia_tool, POINTERS
from strata.kernels import packed_mmq
spec = importlib.util.spec_from_file_location("strata.kernels.packed_mmq_old", os.environ["OLD_MMQ"])
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
P = {**POINTERS, "sorted_ids_ptr": "*i32", "block_expert_ptr": "*i32", "act_ptr": "*fp32", "out_ptr": "*fp32"}
def stats(fn, consts, values, warps=4):
    k = compile_sm90(fn, consts, values, P, num_warps=warps, num_stages=2)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"]); f.flush()
        usage = nvidia_tool("cuobjdump", "--dump-resource-usage", f.name); sass = nvidia_tool("nvdisasm", "-c", f.name)
    ops = [m.group(2) for m in (re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", l) for l in sass.splitlines()) if m]
    import collections
    c = collections.Counter(o.split(".")[0] for o in ops)
    return re.search(r"REG:(\d+).*?STACK:(\d+).*?LOCAL:(\d+)", usage, re.S).groups(), len(ops), " ".join(f"{a}:{b}" for a, b in c.most_common(12))
import os
ASM_ON = os.environ.get("ASM_ON") == "1"
for name, mod in (("old", old), ("new", packed_mmq)):
    for which, qtype in (("gate_up", 12), ("down", 14), ("gate_up", 14), ("down", 12)):
        k = 2048 if which == "gate_up" else 768
        rb = {12: 144, 14: 210}[qtype] * k // 256
        if which == "gate_up":
            fn = mod._gate_up_kernel; values = dict(inter=768, dim=2048, top_k=8, num_pairs=512, stride_we=1536 * rb, stride_wn=rb)
        else:
            fn = mod._down_kernel; values = dict(dim=2048, inter=768, num_pairs=512, stride_we=2048 * rb, stride_wn=rb)
        c = dict(QTYPE=qtype, BLOCK_M=16, BLOCK_N=64, USE_PDL=True)
        if "ASM" in fn.arg_names: c["ASM"] = ASM_ON
        print(name, which, qtype, *stats(fn, c, values))
