"""The byte model's bound on speculation's gain (ByteModel.speculation_bound, a random router) for this session's
spec runs, from their committed JSON: windows of 4 rows committing the measured tokens, and shorter windows with
guessed commits (3 rows: 2.6 tokens, 2 rows: 1.9). Run from the repository root: python <this file>."""
import json
import pathlib

from strata.bench.roofline import ByteModel

HERE = pathlib.Path(__file__).parent
for name in ("q4e_spec.json", "next80_spec.json"):
    doc = json.loads((HERE / name).read_text())
    model = ByteModel(**doc["roofline"]["model"]["bytes"])
    measured = {int(k.split("_c")[-1]): (v["speedup_vs_nospec"], v["runs"][0]["mean_accepted_length"])
                for k, v in doc["results"].items() if k.startswith("strata_spec")}
    for c in (1, 2, 4, 8, 16):
        speedup, committed = measured.get(c, (None, 3.0))
        bounds = [model.speculation_bound(c, 4, committed), model.speculation_bound(c, 3, 2.6),
                  model.speculation_bound(c, 2, 1.9)]
        print(f"{name} c{c}: bound w4 {bounds[0]:.2f} w3 {bounds[1]:.2f} w2 {bounds[2]:.2f}"
              + (f"  measured {speedup:.2f}x (committed {committed:.2f} a window)" if speedup else ""))
