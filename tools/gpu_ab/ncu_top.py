"""The SASS lines with the most warp-stall samples, per kernel, from `ncu --import R --page source --csv
--print-source sass` (a "Kernel Name" line, then a header and one row per instruction, per kernel) on stdin or
a file: `ncu_top.py N [FILE]` prints each kernel's instruction mix by opcode and its top N lines."""
import collections
import csv
import gzip
import sys

top = int(sys.argv[1]) if len(sys.argv) > 1 else 30
path = sys.argv[2] if len(sys.argv) > 2 else None
text = (gzip.open(path, "rt") if path and path.endswith(".gz") else open(path) if path else sys.stdin).read()
kernels, current = [], None
for row in csv.reader(text.splitlines()):
    if row and row[0] == "Kernel Name":
        current = dict(name=row[1], head=None, rows=[])
        kernels.append(current)
    elif current is not None and current["head"] is None:
        current["head"] = row
    elif current is not None and row:
        current["rows"].append(row)
for k in kernels:
    head, rows = k["head"], k["rows"]
    col = {h: i for i, h in enumerate(head)}
    stall, src, execd = (col["Warp Stall Sampling (All Samples)"], col["Source"], col["Instructions Executed"])
    samples = [(float(r[stall] or 0), int(r[execd] or 0), r[src].strip()) for r in rows]
    total = sum(s for s, _, _ in samples)
    if total < 100:
        continue
    executed = sum(e for _, e, _ in samples)
    print(f"\n== {k['name'][:90]}: {len(rows)} SASS lines, {total:.0f} stall samples, {executed} warp instructions")
    by_op, stalls_by_op = collections.Counter(), collections.Counter()
    for s, e, text_ in samples:
        op = text_.split()[0] if text_ else "?"
        op = text_.split()[1] if op.startswith("@") and len(text_.split()) > 1 else op
        op = op.split(".")[0]
        by_op[op] += e
        stalls_by_op[op] += s
    print("   by opcode (executed %, stall %):", ", ".join(
        f"{op} {100 * n / executed:.1f}/{100 * stalls_by_op[op] / total:.1f}" for op, n in by_op.most_common(18)))
    for s, e, text_ in sorted(samples, key=lambda x: -x[0])[:top]:
        print(f"   {100 * s / total:5.1f}%  {e:9d}  {text_[:100]}")
