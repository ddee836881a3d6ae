"""`strata bench offline --plot FILE.png`: output tok/s against concurrency for every arm, and each
strata arm's achieved bandwidth as a fraction of the device copy. matplotlib is optional: without it
the bench says so and writes no plot."""

from __future__ import annotations

import re

_ARM = re.compile(r"^(?P<arm>.+)_[cb](?P<concurrency>\d+)$")  # strata_spec_c8, hf_generate_b1


def series(results: dict, key: str) -> dict[str, list[tuple[int, float]]]:
    """arm -> [(concurrency, results[arm_c<c>][key]) sorted by concurrency] for arms that have `key`."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name, entry in results.items():
        match = _ARM.match(name)
        if match and key in entry:
            out.setdefault(match["arm"], []).append((int(match["concurrency"]), entry[key]))
    return {arm: sorted(points) for arm, points in out.items()}


def write_plot(doc: dict, path: str) -> str:
    """-> a line for the user saying what happened."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"--plot: matplotlib is not installed, so {path} was not written (pip install matplotlib)"
    results = doc["results"]
    fig, (speed, bandwidth) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm, points in series(results, "median_output_tok_s").items():
        speed.plot(*zip(*points), marker="o", label=arm)
    for arm, points in series(results, "median_bandwidth_fraction").items():
        bandwidth.plot(*zip(*points), marker="o", label=arm)
    copy = doc.get("roofline", {}).get("device_copy_bandwidth_bytes_s")
    speed.set(xlabel="concurrency", ylabel="output tok/s (median)", title=doc["config"]["model"])
    bandwidth.set(xlabel="concurrency", ylabel="fraction of device copy bandwidth", ylim=(0, None),
                  title=f"bytes per decode step / step time (copy {copy / 1e9:.0f} GB/s)" if copy else "bandwidth")
    concurrency = doc["config"]["concurrency"]
    for ax in (speed, bandwidth):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrency, [str(c) for c in concurrency])
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"
