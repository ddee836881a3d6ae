"""The SASS lines with the most warp-stall samples, per kernel, from `ncu --import R --page source --csv
--print-source sass` on stdin: `ncu_top.py N` prints the top N of each kernel with their stall reasons."""
import csv
import sys

top = int(sys.argv[1]) if len(sys.argv) > 1 else 30
text = sys.stdin.read()
blocks = [b for b in text.split('"Kernel Name"') if b.strip()] if '"Kernel Name"' in text else [text]
for block in text.split("\n\n"):
    lines = [l for l in block.splitlines() if l.startswith('"')]
    if len(lines) < 2:
        if block.strip():
            print(block.strip()[:300])
        continue
    rows = list(csv.reader(lines))
    head = rows[0]
    try:
        col = next(i for i, h in enumerate(head) if "Warp Stall Sampling (All" in h)
    except StopIteration:
        print("columns:", head[:40])
        continue
    src = next((i for i, h in enumerate(head) if h.strip() in ("Source", "# Source")), 1)
    data = []
    for r in rows[1:]:
        try:
            data.append((float(r[col] or 0), r))
        except (ValueError, IndexError):
            pass
    total = sum(d[0] for d in data) or 1
    print(f"== {len(data)} SASS lines, {total:.0f} stall samples")
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_") or "Stall" in h and i != col][:0]
    for n, r in sorted(data, key=lambda d: -d[0])[:top]:
        print(f"{100 * n / total:5.1f}%  {r[src][:110]}")
