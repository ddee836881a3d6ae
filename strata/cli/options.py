"""CLI options generated from the config dataclasses: one flag per field, its default and help text
taken from the field; `engine_config(args)` rebuilds the frozen EngineConfig, `section_config` any other
config dataclass (e.g. the server's)."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from strata.config import CacheConfig, EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig, SpecConfig

_SECTIONS = {"cache": CacheConfig, "scheduler": SchedulerConfig, "runner": RunnerConfig,
             "experts": ExpertConfig}


def _flag_type(annotation: str):
    if "int" in annotation:
        return int
    if "float" in annotation:
        return float
    return str


def add_section_options(parser: argparse.ArgumentParser, section: str, cls) -> None:
    group = parser.add_argument_group(section)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "").replace("%", "%%")  # argparse %-formats help strings
        if hints[f.name] is bool:
            group.add_argument(flag, dest=f"{section}.{f.name}", default=f.default,
                               action=argparse.BooleanOptionalAction, help=help_text)
            continue
        group.add_argument(flag, dest=f"{section}.{f.name}", default=f.default,
                           type=_flag_type(str(hints[f.name])), metavar=f.name.upper(),
                           help=f"{help_text} (default: {f.default})")


def section_config(args: argparse.Namespace, section: str, cls):
    values = vars(args)
    return cls(**{f.name: values[f"{section}.{f.name}"] for f in dataclasses.fields(cls)})


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default="",
                        help="HF model folder, .gguf file, random:<shape>[?k=v] or a built-in name "
                             "(default: the bundled smollm2-135m)")
    for section, cls in _SECTIONS.items():
        add_section_options(parser, section, cls)
    parser.add_argument("--chat-template", default="", metavar="FILE_OR_TEMPLATE",
                        help="a Jinja chat template to use in place of the model's: a file, or the template itself")
    parser.add_argument("--speculative-config", default=None, metavar="JSON",
                        help='speculative decoding, e.g. \'{"method": "suffix", "num_speculative_tokens": 3}\'; '
                             'methods: mtp, suffix, mtp+suffix, synthetic (with acceptance_length), auto')


def engine_config(args: argparse.Namespace) -> EngineConfig:
    sections = {name: section_config(args, name, cls) for name, cls in _SECTIONS.items()}
    return EngineConfig(model=args.model, chat_template=args.chat_template,
                        speculative=SpecConfig.from_json(args.speculative_config), **sections)
