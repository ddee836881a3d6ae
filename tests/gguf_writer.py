"""Test utility: write a GGUF file from an HF config dict and state dict the way llama.cpp's
convert_hf_to_gguf.py does, through strata.weights.gguf_writer (tensor names from gguf-py's own name map,
llama.cpp's layout transforms and metadata keys), with one type for every tensor or per name pattern, and
placeholder tokens. Types the package cannot quantize are quantized by gguf-py, or (the K and IQ types it
lacks) written as random blocks.
"""

from __future__ import annotations

import re

import gguf
import numpy as np
import torch

from strata.weights.gguf_writer import Vocab
from strata.weights.gguf_writer import write_gguf as write_llama_cpp_gguf
from strata.weights.quantize import SUPPORTED_TYPES, quantize


def write_gguf(path: str, hf_config: dict, state_dict: dict[str, torch.Tensor], quant: str = "F32",
               split_qkvz: bool = True, extra_tensors: dict[str, np.ndarray] | None = None,
               types: dict[str, str] | None = None, split_max_tensors: int = 0) -> list[str]:
    """quant: any GGUF type; 1-D tensors and rows whose length is not a multiple of the block size stay F32,
    as in llama.cpp. types: llama.cpp name pattern (re.search) -> type, overriding `quant` for the tensors it
    matches (the first match wins), e.g. {r"attn_v": "Q6_K"}. The types of strata.weights.quantize (F32, F16,
    BF16, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL) are quantized by it, the other types gguf-py can quantize
    (Q4_0, Q4_1, MXFP4, ...) by gguf-py; the rest (Q2_K, Q3_K, IQ4_XS, ...) get random blocks with small finite scales instead of the
    tensor's values: loads of such a file can be compared with each other, not with the HF model.
    split_qkvz=False writes Qwen3-Next's in_proj_qkvz as older llama.cpp did (ssm_in, HF layout).
    extra_tensors are written as given, under their llama.cpp names (e.g. rope_freqs.weight).
    split_max_tensors > 0 splits the file as gguf-split does (<stem>-00001-of-0000N.gguf, metadata in
    part 1). Returns the paths written."""

    def type_of(name: str, shape: tuple[int, ...]) -> gguf.GGMLQuantizationType:
        qtype = gguf.GGMLQuantizationType[next((t for p, t in (types or {}).items() if re.search(p, name)), quant)]
        if len(shape) < 2 or shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
            return gguf.GGMLQuantizationType.F32
        return qtype

    rng = np.random.default_rng(0)

    def encode(tensor: torch.Tensor, qtype: gguf.GGMLQuantizationType):
        if qtype in SUPPORTED_TYPES:
            return quantize(tensor, qtype)
        try:
            return gguf.quants.quantize(tensor.float().numpy(), qtype)
        except NotImplementedError:
            return random_blocks(tuple(tensor.shape), qtype, rng)

    return write_llama_cpp_gguf(path, hf_config, state_dict, type_of, placeholder_vocab(hf_config), split_qkvz,
                                extra_tensors, split_max_tensors, encode)


def placeholder_vocab(cfg: dict) -> Vocab:
    """<t0>, <t1>, ... with the config's BOS and EOS ids."""
    ids = {name: cfg[key] for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"))
           if isinstance(cfg.get(key), int)}
    return Vocab("gpt2", [f"<t{i}>" for i in range(cfg["vocab_size"])],
                 [gguf.TokenType.NORMAL] * cfg["vocab_size"], special_ids=ids)


# byte offsets of the float16 scales (d, and dmin where the type has one) in a block of each type
# gguf-py cannot quantize; the other bytes (sub-block scales, quants) may be anything
F16_SCALES = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_XS": (0,), "IQ4_NL": (0,), "Q2_K": (80, 82), "Q3_K": (108,),
              "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,)}


def random_blocks(shape: tuple[int, ...], qtype, rng: np.random.Generator, scale: float = 1e-3) -> np.ndarray:
    """Random uint8 blocks of `qtype` for values of `shape` [..., K], with finite float16 scales near `scale`
    (the sub-block scales and quants stay random), so that every block decodes to finite values."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    num_blocks = int(np.prod(shape)) // block_size
    blocks = rng.integers(0, 256, (num_blocks, type_size), dtype=np.uint8)
    for offset in F16_SCALES.get(qtype.name, ()):
        d = (rng.uniform(0.5, 1.5, num_blocks) * scale).astype(np.float16)
        blocks[:, offset:offset + 2] = d.view(np.uint8).reshape(num_blocks, 2)
    if qtype.name == "IQ1_M":  # its float16 d is the top nibbles of the four uint16 scale words (bytes 48-55)
        d = (rng.uniform(0.5, 1.5, num_blocks) * scale).astype(np.float16).view(np.uint16)
        words = blocks[:, 48:56].copy().view(np.uint16)                                    # [B, 4]
        for i in range(4):
            words[:, i] = (words[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
        blocks[:, 48:56] = words.view(np.uint8)
    return blocks.reshape(*shape[:-1], shape[-1] // block_size * type_size)
