"""`strata chat`: an interactive terminal chat with a model loaded in-process, streaming tokens as
they come. Commands: /reset clears the conversation, /quit (or Ctrl-D) leaves."""

from __future__ import annotations

import argparse

from strata.cli.options import add_engine_options, engine_config
from strata.types import SamplingParams


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="interactive terminal chat (model loaded in-process)")
    add_engine_options(p)
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from strata.engine.llm import LLM

    console = Console(highlight=False)
    with console.status("loading model…"):
        llm = LLM.from_config(engine_config(args), quiet=True)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p)
    console.print(f"[bold]strata chat[/bold] — {args.model or 'smollm2-135m'} on {llm.engine.device} "
                  f"({llm.engine.dtype}). /reset clears, /quit leaves.")
    history = _fresh_history(args.system)
    while True:
        try:
            text = console.input("[bold green]> [/bold green]").strip()
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if text in ("/quit", "/exit"):
            return 0
        if text == "/reset":
            history = _fresh_history(args.system)
            console.print("[dim](conversation cleared)[/dim]")
            continue
        if not text:
            continue
        history.append({"role": "user", "content": text})
        reply = _stream_reply(console, llm, history, params)
        history.append({"role": "assistant", "content": reply})


def _fresh_history(system: str | None) -> list[dict]:
    return [{"role": "system", "content": system}] if system else []


def _stream_reply(console, llm, history: list[dict], params: SamplingParams) -> str:
    prompt = {"prompt_token_ids": llm.encode_chat(history)}
    parts = []
    try:
        for delta in llm.stream(prompt, params):
            console.out(delta.new_text, end="", highlight=False)
            parts.append(delta.new_text)
    except KeyboardInterrupt:
        console.print("[dim] (stopped)[/dim]", end="")
    console.out("")
    return "".join(parts)
