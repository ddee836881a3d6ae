"""A Q4_K_M file of a MoE whose expert down rows 256 does not divide (Qwen4-Exp's 640) carries llama.cpp's
fallbacks: Q5_0 down experts (Q8_0 on the use-more-bits layers). Written by `strata quantize` from tiny random
models, such a file loads with those experts packed as the file's Q5_0 blocks (sizes as the memory plan counts
them), and gives the greedy tokens of the same file loaded dequantized, expert placement included."""

from __future__ import annotations

import gguf
import pytest
import torch

from strata import LLM, SamplingParams
from strata.config import EngineConfig, ExpertConfig, RunnerConfig, SchedulerConfig
from strata.model.moe import LocalExperts, PackedLocalExperts
from strata.model.packed import PackedWeight
from strata.weights import gguf_source
from strata.weights.gguf_export import export_gguf
from strata.weights.gguf_source import GGUFSource
from strata.weights.loaded_sizes import scheme_sizes
from strata.weights.loader import build_model
from tiny_models import prompt_logits

Q = gguf.GGMLQuantizationType
IDS = [5, 17, 99, 3, 42, 150, 8, 77, 61, 12]
PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": [3 + i, 17, 40 + 7 * i, 9, 100 - i, 55 + i]} for i in range(3)]
# expert down rows of 320 values: 10 blocks of 32, not whole superblocks; layer 1 of 2 is a use-more-bits layer
QWEN3_MOE = ("random:qwen3-30b-a3b?num_hidden_layers=2&hidden_size=256&moe_intermediate_size=320&num_experts=4"
             "&num_experts_per_tok=2&vocab_size=512&num_attention_heads=4&num_key_value_heads=2&head_dim=64"
             "&max_position_embeddings=256")
# Qwen4-Exp's own expert width (640), at a tiny hidden size; layers 2 and 3 of 4 use more bits
QWEN4EXP = ("random:qwen4exp-125b?num_hidden_layers=4&hidden_size=256&moe_intermediate_size=640"
            "&shared_expert_intermediate_size=256&num_experts=4&num_experts_per_tok=2&vocab_size=512"
            "&num_attention_heads=2&num_key_value_heads=1&head_dim=128&linear_num_key_heads=2"
            "&linear_num_value_heads=4&linear_key_head_dim=64&linear_value_head_dim=64&max_position_embeddings=256"
            "&hc_lowrank=32&indexer_head_dim=128&indexer_budget=8&ngram_vocab_size_base=300")


def load(path: str, packed: bool):
    with pytest.MonkeyPatch.context() as patch:
        if not packed:
            patch.setattr(gguf_source, "keeps_blocks", lambda name, qtype: False)
            patch.setattr(gguf_source, "why_experts_dense", lambda entries: "the test asks for dense experts")
        return build_model(GGUFSource(path), "cpu", "float32", quiet=True)


def make_llm(path: str, packed: bool = True, **experts) -> LLM:
    # exact CPU products: packing must give the dequantized model's own numbers
    config = EngineConfig(model=path, runner=RunnerConfig(device="cpu", dtype="float32", cpu_matmul="exact"),
                          scheduler=SchedulerConfig(max_num_seqs=4), experts=ExpertConfig(**experts))
    with pytest.MonkeyPatch.context() as patch:
        if not packed:
            patch.setattr(gguf_source, "keeps_blocks", lambda name, qtype: False)
            patch.setattr(gguf_source, "why_experts_dense", lambda entries: "the test asks for dense experts")
        return LLM.from_config(config)


def greedy(llm: LLM) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, PARAMS)]


def down_types(model) -> list[str]:
    return [Q(layer.mlp.experts.qtype2).name for layer in model.model.layers]


@pytest.fixture(scope="module")
def qwen3_moe_file(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("q5") / "moe.gguf")
    export_gguf(QWEN3_MOE, path, "q4_k_m", seed=1)
    return path


def test_quantize_writes_llama_cpps_fallbacks_for_the_down_experts(qwen3_moe_file):
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(qwen3_moe_file).tensors}
    assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in range(2)] == ["Q5_0", "Q8_0"]
    assert {types[f"blk.{i}.ffn_{p}_exps.weight"] for i in range(2) for p in ("gate", "up")} == {"Q4_K"}


def test_q5_0_experts_load_packed_as_the_files_blocks(qwen3_moe_file):
    source = GGUFSource(qwen3_moe_file)
    model = build_model(source, "cpu", "float32", quiet=True)
    assert all(isinstance(layer.mlp.experts, PackedLocalExperts) for layer in model.model.layers)
    assert down_types(model) == ["Q5_0", "Q8_0"]
    w2 = model.model.layers[0].mlp.experts.w2
    stored = next(t for t in source.reader.tensors if t.name == "blk.0.ffn_down_exps.weight")
    assert w2.dtype == torch.uint8 and w2.shape == (4, 256, 10 * 22)  # 10 Q5_0 blocks of 22 bytes a row
    assert w2.data_ptr() == torch.from_numpy(stored.data).data_ptr()  # a view of the file, not a copy
    sizes = source.weight_sizes(torch.bfloat16)
    layer_bytes = [sum(t.n_bytes for t in source.reader.tensors if t.name.startswith(f"blk.{i}.") and "_exps" in t.name)
                   for i in range(2)]
    assert sizes.experts == sum(layer_bytes) and sizes.num_experts == 8  # the memory plan counts the packed bytes
    assert sizes.slot_bytes == max(layer_bytes) // 4 == layer_bytes[1] // 4  # a slot holds the Q8_0 layer's expert
    assert sizes == scheme_sizes(QWEN3_MOE, "q4_k_m", torch.bfloat16)


def test_packed_file_gives_the_dequantized_models_greedy_tokens(qwen3_moe_file):
    """Packed (every projection and expert as the file's blocks) against dense (all of it dequantized at load):
    the logits to float32 summation order, and the same greedy tokens, with all experts in RAM and with 50 %
    of them in the expert cache (the rest computed by the CPU pool)."""
    packed, dense = load(qwen3_moe_file, packed=True), load(qwen3_moe_file, packed=False)
    assert isinstance(packed.model.layers[0].self_attn.qkv_proj.weight, PackedWeight)
    assert isinstance(dense.model.layers[0].mlp.experts, LocalExperts)
    expected = prompt_logits(dense, IDS)
    assert ((prompt_logits(packed, IDS) - expected).abs().max() / expected.abs().max()).item() < 1e-5
    reference = greedy(make_llm(qwen3_moe_file, packed=False))
    assert len({tuple(tokens) for tokens in reference}) == len(PROMPTS)  # the prompts lead apart
    assert greedy(make_llm(qwen3_moe_file)) == reference
    assert greedy(make_llm(qwen3_moe_file, expert_cache="50%", expert_swap_interval=0)) == reference


def test_qwen4_exp_q4_k_m_keeps_its_640_wide_q5_0_down_experts_packed(tmp_path):
    """Qwen4-Exp's expert width at Q4_K_M: Q5_0 down experts on layers 0-1, Q8_0 on 2-3 (use more bits), packed
    at load; greedy tokens equal the dequantized load's."""
    path = str(tmp_path / "q4e.gguf")
    export_gguf(QWEN4EXP, path, "q4_k_m", seed=2)
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in range(4)] == ["Q5_0", "Q5_0", "Q8_0", "Q8_0"]
    packed = load(path, packed=True)
    assert down_types(packed) == ["Q5_0", "Q5_0", "Q8_0", "Q8_0"]
    assert GGUFSource(path).weight_sizes(torch.bfloat16) == scheme_sizes(QWEN4EXP, "q4_k_m", torch.bfloat16)
    expected = prompt_logits(load(path, packed=False), IDS)
    assert ((prompt_logits(packed, IDS) - expected).abs().max() / expected.abs().max()).item() < 1e-5
    assert greedy(make_llm(path)) == greedy(make_llm(path, packed=False))
