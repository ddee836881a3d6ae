"""Interval arithmetic on a profiler trace's kernels, for spec_timeline.py and run_idle.py."""

import torch


def device_work(events):
    """[(start, end, name)] of a trace's kernels and copies, sorted: not the user annotations' echoes on the device
    timeline (a record_function range shows there too, and would cover the gaps inside it)."""
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                  if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start
                  and not getattr(e, "is_user_annotation", False))


def union(intervals):
    """Total length covered by (start, end) intervals."""
    total, end = 0.0, -1.0
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def idle_gaps(kernels, start, stop):
    """Device-idle intervals within [start, stop] between the kernels' intervals."""
    gaps, end = [], start
    for a, b in sorted(kernels):
        if a > end:
            gaps.append((end, min(a, stop)))
        end = max(end, b)
    if end < stop:
        gaps.append((end, stop))
    return [(a, b) for a, b in gaps if b > a]
