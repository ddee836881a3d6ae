"""`strata quantize SPEC OUT --scheme q4_k_m`: write any model Strata loads (HF folder, .gguf file,
random:<shape>) as a GGUF file of a quantization scheme, with a tokenizer (strata.weights.gguf_export);
prints the types, counts, size and time of what it wrote."""

from __future__ import annotations

import argparse

# strata.weights.gguf_export.SCHEMES, spelled here so that every `strata` command does not import torch
# (tests/weights/test_gguf_export.py checks the two agree)
SCHEME_NAMES = ("q2_k", "q3_k_m", "q4_k_m", "q6_k", "q8_0", "mxfp4_moe", "iq4_xs", "iq3_xxs", "iq2_xxs", "f16", "bf16",
                "f32")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="write a model as a quantized GGUF file (e.g. a random shape as Q4_K_M)")
    p.add_argument("model", help="HF model folder, .gguf file, random:<shape>[?k=v] or a built-in name")
    p.add_argument("output", help="the .gguf file to write")
    p.add_argument("--scheme", default="q4_k_m", type=str.lower,
                   help=f"quantization scheme, one of {', '.join(SCHEME_NAMES)} (default: q4_k_m, as llama.cpp's)")
    p.add_argument("--device", default="cpu", help="where to build a random model and quantize (cpu, cuda)")
    p.add_argument("--seed", type=int, default=0, help="seed of a random:<shape> model's weights")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                   help="a random model's dtype before quantizing (default: float32 on the CPU, else bfloat16)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from strata.weights.gguf_export import export_gguf

    result = export_gguf(args.model, args.output, args.scheme, args.device, args.seed, args.dtype, quiet=False)
    print(result.summary())
    return 0
