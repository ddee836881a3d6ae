"""The in-process one-stream A/B scripts' shared parts (c1_ab.py, pairs_ab.py, env_ab.py): an engine on a model, and
one arm's decode rate measured after its graphs are recaptured."""
import time, torch
from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig

PROMPT = {"prompt_token_ids": list(range(100, 164))}


def engine(path: str, **experts) -> LLM:
    """`experts`: ExpertConfig fields (e.g. expert_cache="25%", cpu_threads=16 for an offloaded arm)."""
    return LLM.from_config(EngineConfig(model=path, runner=RunnerConfig(device="cuda"),
                                        scheduler=SchedulerConfig(max_model_len=4096, max_num_seqs=8),
                                        experts=ExpertConfig(**experts)))


def decode_rate(llm: LLM) -> tuple[float, list[int]]:
    """Recapture the graphs under the current settings, then time 256 decode steps after a 64-token prompt ->
    (tok/s including that prefill, the greedy tokens)."""
    graphs = llm.engine.runner.graphs
    for key in list(graphs.graphs):
        graphs._release(key)
    llm.generate([PROMPT], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))  # recapture
    torch.cuda.synchronize(); t = time.perf_counter()
    out = llm.generate([PROMPT], SamplingParams(max_tokens=257, temperature=0, ignore_eos=True))
    torch.cuda.synchronize()
    return 256 / (time.perf_counter() - t), out[0].outputs[0].token_ids


def report(results: dict, tokens: dict, first: str) -> None:
    for arm, rates in results.items():
        print(f"{arm:>24}: {sorted(rates)[len(rates)//2]:8.1f} tok/s (incl. prefill of 64)  runs "
              f"{[round(x) for x in rates]}  tokens {'same' if tokens[arm] == tokens[first] else 'DIFFER'}")
