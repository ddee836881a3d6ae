"""Host time of GraphInputs.fill (the per-step host work of every graph-replayed step) on this machine's CPU:
median of 5 runs of 500 fills, per layout. Usage: python fill_host_bench.py (from the repository root)."""
import statistics
import time

from strata.runner.graph_inputs import GraphInputs
from strata.types import ScheduledSlot

for slots, n in ((1, 1), (4, 1), (8, 1), (32, 1), (1, 4), (4, 4), (16, 4)):
    inputs = GraphInputs(max_slots=64, max_tokens_per_slot=4, max_blocks_per_slot=512, block_size=16,
                         scratch_block=9999, scratch_state_row=63, device="cpu")
    tables = {s: list(range(s * 200, s * 200 + 150)) for s in range(slots)}       # ~2,400-token contexts
    scheduled = [ScheduledSlot(s, 2000 + s, n, [], list(range(n))) for s in range(slots)]
    padded = slots + (slots > 1 and slots % 4 != 0)                                   # one padding slot or none
    runs = []
    for _ in range(5):
        for _ in range(50):
            inputs.fill(scheduled, tables, padded, n)
        started = time.perf_counter()
        for _ in range(500):
            inputs.fill(scheduled, tables, padded, n)
        runs.append((time.perf_counter() - started) / 500 * 1e6)
    print(f"{slots:2d} slots x {n} tokens: {statistics.median(runs):6.1f} us a fill")
