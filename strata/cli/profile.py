"""`strata profile MODEL --output FILE`: run a workload and save the routing counts of every MoE layer
as an expert profile, which `--expert-profile FILE` later uses to fill the hot set."""

from __future__ import annotations

import argparse
import sys

from strata.cli.options import add_engine_options, engine_config
from strata.types import SamplingParams

_DEFAULT_PROMPTS = (
    "Explain how a hash map handles collisions.",
    "Write a Python function that merges two sorted lists.",
    "Summarise the causes of the French Revolution in three sentences.",
    "What is the derivative of x^3 * sin(x)?",
    "Translate 'the weather is nice today' into German and Spanish.",
    "List five uses of a Raspberry Pi at home.",
    "Write a short poem about autumn leaves.",
    "How do vaccines train the immune system?",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="record a routing profile of a MoE model from a workload")
    add_engine_options(p)
    p.add_argument("--output", required=True, help="where to write the profile (JSON)")
    p.add_argument("--prompts", default=None,
                   help="text file with one prompt per line (default: a small built-in mix of tasks)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens generated per prompt")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from strata.engine.llm import LLM

    config = engine_config(args)
    # prompts run eagerly: a multi-prompt CUDA graph pads prompts in place, and its routing statistics
    # count rows by position (some padding rows in, some real rows out), which a profile must not
    config = dataclasses.replace(config, runner=dataclasses.replace(config.runner, cuda_graph_prompt_tokens=0))
    llm = LLM.from_config(config, quiet=False)
    manager = llm.engine.experts
    if manager is None:
        raise ValueError(f"{args.model or 'the default model'} has no MoE layers: there is no routing to profile")
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    outputs = llm.generate(_prompts(args, llm), params)
    path = manager.save_profile(args.output)
    num_tokens = sum(len(o.prompt_token_ids) + len(o.outputs[0].token_ids) for o in outputs)
    print(f"profile of {len(outputs)} prompts ({num_tokens} tokens) over {manager.num_layers} MoE layers "
          f"written to {path}", file=sys.stderr)
    return 0


def _prompts(args: argparse.Namespace, llm) -> list:
    if args.prompts:
        with open(args.prompts) as f:
            texts = [line.strip() for line in f if line.strip()]
        if not texts:
            raise ValueError(f"{args.prompts} has no prompts (one per line)")
    else:
        texts = list(_DEFAULT_PROMPTS)
    if llm.tokenizer is not None:
        return texts
    # a model without a tokenizer (random weights): the same number of prompts as token ids from the bytes
    vocab = llm.engine.model_config.vocab_size
    return [{"prompt_token_ids": [b % vocab for b in text.encode()]} for text in texts]
