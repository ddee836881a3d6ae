"""Host wall time of wrapped calls, for the offload profiles (offload_prof.py, offload_timeline.py)."""
import time


def timed(name, fn, spans):
    """fn wrapped so that each call's seconds are appended to spans[name] (spans: a defaultdict(list))."""
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spans[name].append(time.perf_counter() - start)
    return run
