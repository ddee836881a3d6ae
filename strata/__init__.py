"""Strata: an inference engine and server for Mixture-of-Experts language models.

`from strata import LLM, SamplingParams` is the offline API. LLM is imported lazily so that light
users of the package (the scheduler, the HTTP server) do not pull in torch.
"""

from strata.types import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("LLM", "RequestOutput", "CompletionOutput"):
        from strata.engine import llm

        return getattr(llm, name)
    raise AttributeError(f"module 'strata' has no attribute {name!r}")
