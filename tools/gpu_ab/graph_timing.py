"""Microseconds per call of fn(i) replayed from a CUDA graph (launch overhead out); i cycles over `copies`
(weights rotated so L2 is cold), each graph holding `copies * rounds` calls."""
import torch


def graph_time(fn, copies: int = 1, rounds: int = 20, reps: int = 10) -> float:
    fn(0)
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn(0)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(copies * rounds):
                fn(i % copies)
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (reps * copies * rounds)
