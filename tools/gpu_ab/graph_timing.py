"""Kernel time inside a CUDA graph: fn(i) for i over `copies` rotated inputs (cold L2), replayed."""
import torch


def graph_time(fn, copies, reps=5):
    fn(0); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(0)
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for i in range(copies * 4):
                fn(i % copies)
    torch.cuda.synchronize()
    g.replay(); torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(reps):
        g.replay()
    ev[1].record(); torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1]) * 1e3 / (reps * copies * 4)


def time_arms(arms, copies, digits=2):
    """{name: fn(i)} -> ({name: us or "failed: Error"}, {name: us} of those that ran): a tiling that does not
    compile is a result too."""
    times = {}
    for arm, fn in arms.items():
        try:
            times[arm] = round(graph_time(fn, copies), digits)
        except Exception as e:  # noqa: BLE001
            times[arm] = f"failed: {type(e).__name__}"
    return times, {a: t for a, t in times.items() if isinstance(t, float)}
