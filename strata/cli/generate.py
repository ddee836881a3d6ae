"""`strata generate`: complete one prompt (or a chat message) and print the text as it streams."""

from __future__ import annotations

import argparse
import sys

from strata.cli.options import add_engine_options, engine_config
from strata.types import SamplingParams


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate text for one prompt")
    add_engine_options(p)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message (chat template)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--sampling-seed", type=int, default=None, help="seed of this request's sampling")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from strata.engine.llm import LLM

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, seed=args.sampling_seed)
    llm = LLM.from_config(engine_config(args), quiet=False)
    prompt = {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": args.prompt}])} \
        if args.chat else args.prompt
    for delta in llm.stream(prompt, params):
        sys.stdout.write(delta.new_text)
        sys.stdout.flush()
        if delta.finished:
            print(f"\n[{delta.finish_reason.value}]", file=sys.stderr)
    return 0
