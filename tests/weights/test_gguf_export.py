"""strata.weights.gguf_export (`strata quantize`): models written as GGUF files in a scheme load back through
GGUFSource with the types the scheme names (llama.cpp's Q4_K_M choices, fallbacks for rows the blocks do not
divide), logits equal to the source model's at F32 and close at Q8_0 / Q4_K_M, and a tokenizer that
strata.tokenizer loads: synthetic for random shapes, converted from an HF folder, copied from a GGUF. A Qwen3.5
folder's value heads are tiled once: re-exporting its GGUF keeps them as they are. A Qwen4-Exp model goes out as
llama.cpp's qwen4exp and comes back."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import transformers

from strata.cli.main import main
from strata.cli.quantize import SCHEME_NAMES
from strata.tokenizer import load_tokenizer
from strata.tokenizer_gguf import PRE_TOKENIZERS
from strata.weights.gguf_export import SCHEMES, choose_types, export_gguf, fallback_type, synthetic_vocab
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loaded_sizes import scheme_sizes
from strata.weights.loader import build_model
from strata.weights.source import open_source
from tiny_models import add_random_mtp, hf_config, prompt_logits

Q = gguf.GGMLQuantizationType
IDS = [5, 17, 99, 3, 42, 150, 8, 77, 61, 12]
# every row a whole number of 256-value superblocks; top-k = all experts, so routing is continuous in the weights
QWEN3_MOE = ("random:qwen3-30b-a3b?num_hidden_layers={layers}&hidden_size=256&moe_intermediate_size=256"
             "&num_experts=4&num_experts_per_tok=4&vocab_size=512&num_attention_heads=4&num_key_value_heads=2"
             "&head_dim=64&max_position_embeddings=256")
QWEN3_NEXT = ("random:qwen3-next-80b-a3b?num_hidden_layers=4&hidden_size=256&moe_intermediate_size=256"
              "&shared_expert_intermediate_size=256&num_experts=4&num_experts_per_tok=4&vocab_size=512"
              "&num_attention_heads=2&num_key_value_heads=1&head_dim=128&linear_num_key_heads=2"
              "&linear_num_value_heads=4&linear_key_head_dim=64&linear_value_head_dim=64&max_position_embeddings=256")
QWEN3_6 = ("random:qwen3.6-35b-a3b?num_hidden_layers=4&hidden_size=256&moe_intermediate_size=256"
           "&shared_expert_intermediate_size=256&num_experts=4&num_experts_per_tok=4&vocab_size=512"
           "&num_attention_heads=2&num_key_value_heads=1&head_dim=128&linear_num_key_heads=2"
           "&linear_num_value_heads=4&linear_key_head_dim=64&linear_value_head_dim=64&max_position_embeddings=256")
# hyper-connections, QSA past 8 tokens, PLE on layer 0 (a table of 16 heads x rows of 16), an MTP head
QWEN4EXP = ("random:qwen4exp-125b?num_hidden_layers=4&hidden_size=256&moe_intermediate_size=256"
            "&shared_expert_intermediate_size=256&num_experts=4&num_experts_per_tok=4&vocab_size=512"
            "&num_attention_heads=2&num_key_value_heads=1&head_dim=128&linear_num_key_heads=2"
            "&linear_num_value_heads=4&linear_key_head_dim=64&linear_value_head_dim=64&max_position_embeddings=256"
            "&hc_lowrank=32&indexer_head_dim=128&indexer_budget=8&ngram_vocab_size_base=300")
# rows of 320 (Q5_0 in place of Q4_K, Q8_0 of Q6_K) and of 80 (no block type fits: F16); tied embeddings
LLAMA_ODD = ("random:smollm2-135m?num_hidden_layers=2&hidden_size=320&intermediate_size=80&vocab_size=512"
             "&num_attention_heads=5&num_key_value_heads=1&max_position_embeddings=256")


def rms_rel(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).pow(2).mean() / expected.pow(2).mean()).sqrt().item()


def source_logits(spec: str) -> torch.Tensor:
    return prompt_logits(build_model(open_source(spec), "cpu", "float32", quiet=True), IDS)


def file_logits(path: str) -> torch.Tensor:
    return prompt_logits(build_model(GGUFSource(path), "cpu", "float32", quiet=True), IDS)


def file_types(path: str) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def moe_spec() -> str:
    return QWEN3_MOE.format(layers=2)


# ---- types -------------------------------------------------------------------------------------------

def test_q4_k_m_types_are_llama_cpps(tmp_path):
    """8 layers: llama.cpp's use-more-bits layers are 0 (first eighth), 3 and 6 ((i - 1) % 3 == 2), 7 (last eighth)."""
    path = str(tmp_path / "m.gguf")
    result = export_gguf(QWEN3_MOE.format(layers=8), path, "q4_k_m")
    types = file_types(path)
    assert types.pop("token_embd.weight") == "Q4_K" and types.pop("output.weight") == "Q6_K"
    assert types.pop("output_norm.weight") == "F32"
    more_bits = {0, 3, 6, 7}
    for i in range(8):
        expected = {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_output": "Q4_K", "ffn_gate_exps": "Q4_K",
                    "ffn_up_exps": "Q4_K", "attn_v": "Q6_K" if i in more_bits else "Q4_K",
                    "ffn_down_exps": "Q6_K" if i in more_bits else "Q4_K", "ffn_gate_inp": "F32",
                    "attn_norm": "F32", "ffn_norm": "F32", "attn_q_norm": "F32", "attn_k_norm": "F32"}
        assert {name: types.pop(f"blk.{i}.{name}.weight") for name in expected} == expected
    assert types == {}
    assert result.tensors == {"Q4_K": 1 + 5 * 8 + 2 * 4, "Q6_K": 1 + 2 * 4, "F32": 1 + 5 * 8}
    assert sum(result.type_bytes.values()) == sum(t.n_bytes for t in gguf.GGUFReader(path).tensors)
    assert gguf.GGUFReader(path).fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q4_K_M


def test_mxfp4_moe_keeps_the_experts_in_mxfp4_and_loads_them_packed(moe_spec, tmp_path):
    """mxfp4_moe as llama.cpp's MXFP4_MOE: the routed experts MXFP4, every other weight Q8_0 (the routers F32); the
    file loads its experts as the MXFP4 blocks, whose logits equal the same file's dense load within float32."""
    path = str(tmp_path / "m.gguf")
    export_gguf(moe_spec, path, "mxfp4_moe")
    types = file_types(path)
    assert {name: kind for name, kind in types.items() if "_exps" in name} == {
        f"blk.{i}.ffn_{part}_exps.weight": "MXFP4" for i in range(2) for part in ("gate", "up", "down")}
    others = {kind for name, kind in types.items() if "_exps" not in name and not name.endswith("norm.weight")}
    assert others == {"Q8_0", "F32"} and types["blk.0.ffn_gate_inp.weight"] == "F32"
    assert gguf.GGUFReader(path).fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_MXFP4_MOE
    source = GGUFSource(path)
    assert source.experts_packed
    packed = build_model(source, "cpu", "float32", quiet=True)
    experts = packed.model.layers[0].mlp.experts
    assert experts.w13.dtype == torch.uint8 and gguf.GGMLQuantizationType(experts.qtype13).name == "MXFP4"
    with pytest.MonkeyPatch.context() as patch:
        from strata.weights import gguf_source

        patch.setattr(gguf_source, "why_experts_dense", lambda entries: "the test asks for dense experts")
        dense = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    expected = prompt_logits(dense, IDS)
    assert ((prompt_logits(packed, IDS) - expected).abs().max() / expected.abs().max()).item() < 1e-5


@pytest.mark.parametrize("scheme", ["iq4_xs", "iq3_xxs", "iq2_xxs"])
def test_i_quant_scheme_types_are_llama_cpps_without_an_importance_matrix(scheme):
    """16 blocks: ffn_down's first eighth (blocks 0-1) gets the bump (iq4_xs Q5_K, iq3_xxs Q4_K, iq2_xxs Q2_K; iq3_xxs
    Q3_K after); attn_v Q5_K / Q4_K / Q4_K; iq3_xxs's attn_q / attn_k IQ2_S and attn_output IQ3_S; the LM head Q6_K /
    Q5_K / Q5_K, token_embd the scheme's / IQ3_S / Q2_K; a row of 320 falls back to IQ4_NL."""
    names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
             "ffn_down_shexp")
    shapes = [("token_embd.weight", (512, 256)), ("output.weight", (512, 256)), ("blk.0.ffn_gate_exps.weight",
                                                                                 (4, 256, 320))]
    shapes += [(f"blk.{i}.{name}.weight", (256, 256)) for i in range(16) for name in names if (i, name) != (
        0, "ffn_gate_exps")]
    types = {name: qtype.name for name, qtype in choose_types(SCHEMES[scheme], shapes, 16).items()}
    base = scheme.upper()
    head, embd, attn_v, down_first, down_rest = {"iq4_xs": ("Q6_K", base, "Q5_K", "Q5_K", base),
                                                 "iq3_xxs": ("Q5_K", "IQ3_S", "Q4_K", "Q4_K", "Q3_K"),
                                                 "iq2_xxs": ("Q5_K", "Q2_K", "Q4_K", "Q2_K", base)}[scheme]
    assert types.pop("output.weight") == head and types.pop("token_embd.weight") == embd
    assert types.pop("blk.0.ffn_gate_exps.weight") == "IQ4_NL"
    for i in range(16):
        down = down_first if i < 2 else down_rest
        qk = "IQ2_S" if scheme == "iq3_xxs" else base
        expected = {"attn_q": qk, "attn_k": qk, "attn_v": attn_v, "ffn_down_exps": down, "ffn_down_shexp": down,
                    "attn_output": "IQ3_S" if scheme == "iq3_xxs" else base, "ffn_gate_exps": base,
                    "ffn_up_exps": base}
        if i == 0:
            expected.pop("ffn_gate_exps")
        assert {name: types.pop(f"blk.{i}.{name}.weight") for name in expected} == expected
    assert types == {}


@pytest.mark.parametrize("scheme, bound", [("iq4_xs", 0.2), ("iq3_xxs", 0.35)])
def test_i_quant_files_load_their_experts_packed(moe_spec, tmp_path, scheme, bound):
    """An iq4_xs / iq3_xxs file of the MoE shape: experts packed in the scheme's types (gate/up IQ4_XS or IQ3_XXS,
    down IQ4_XS or Q4_K / Q3_K), logits near the source model's (relative RMS; measured 0.145 and 0.283 where q4_k_m
    gives 0.144 and q3_k_m 0.246) and the file's general.file_type llama.cpp's."""
    path = str(tmp_path / "m.gguf")
    export_gguf(moe_spec, path, scheme)
    file_type = {"iq4_xs": gguf.LlamaFileType.MOSTLY_IQ4_XS, "iq3_xxs": gguf.LlamaFileType.MOSTLY_IQ3_XXS}[scheme]
    assert gguf.GGUFReader(path).fields["general.file_type"].contents() == file_type
    source = GGUFSource(path)
    assert source.experts_packed
    model = build_model(source, "cpu", "float32", quiet=True)
    experts = model.model.layers[0].mlp.experts
    assert Q(experts.qtype13).name == scheme.upper()
    assert rms_rel(prompt_logits(model, IDS), source_logits(moe_spec)) < bound


@pytest.mark.parametrize("scheme", ["q3_k_m", "q2_k"])
def test_low_bit_scheme_types_are_llama_cpps(scheme):
    """16 blocks: q3_k_m gives the first two attn_v Q5_K and the rest Q4_K, ffn_down Q5_K in the first sixteenth
    (block 0) and Q4_K after, attn_output Q4_K; q2_k attn_v Q4_K, ffn_down and attn_output Q3_K; the LM head Q6_K,
    the routers F32, every other weight the scheme's type."""
    names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
             "ffn_gate_inp")
    shapes = [("token_embd.weight", (512, 256)), ("output.weight", (512, 256))]
    shapes += [(f"blk.{i}.{name}.weight", (256, 256)) for i in range(16) for name in names]
    types = {name: qtype.name for name, qtype in choose_types(SCHEMES[scheme], shapes, 16).items()}
    base = "Q3_K" if scheme == "q3_k_m" else "Q2_K"
    assert types.pop("output.weight") == "Q6_K" and types.pop("token_embd.weight") == base
    for i in range(16):
        if scheme == "q3_k_m":
            special = {"attn_v": "Q5_K" if i < 2 else "Q4_K", "ffn_down_exps": "Q5_K" if i == 0 else "Q4_K",
                       "attn_output": "Q4_K"}
        else:
            special = {"attn_v": "Q4_K", "ffn_down_exps": "Q3_K", "attn_output": "Q3_K"}
        expected = {"attn_q": base, "attn_k": base, "ffn_gate_exps": base, "ffn_up_exps": base, "ffn_gate_inp": "F32",
                    **special}
        assert {name: types.pop(f"blk.{i}.{name}.weight") for name in names} == expected, i
    assert types == {}


def test_tied_token_embd_is_the_lm_head():
    """Without output.weight, llama.cpp gives token_embd the LM head's type."""
    tied = choose_types(SCHEMES["q4_k_m"], [("token_embd.weight", (512, 256))], 1)
    untied = choose_types(SCHEMES["q4_k_m"], [("token_embd.weight", (512, 256)), ("output.weight", (512, 256))], 1)
    assert tied == {"token_embd.weight": gguf.GGMLQuantizationType.Q6_K}
    assert untied == {"token_embd.weight": gguf.GGMLQuantizationType.Q4_K, "output.weight": gguf.GGMLQuantizationType.Q6_K}


# (scheme, type of blk.1's attn_q / ffn_gate / ffn_up, attn_v (Q6_K on this use-more-bits layer at q4_k_m), the
# tied token_embd (the LM head's Q6_K at q4_k_m), bound on the logits' relative RMS error) where rows of 320 do
# not divide 256: Q5_0 weights are ~4 % off (RMS; measured 10 % on these logits), Q8_0 ~0.6 %
FALLBACKS = [("q4_k_m", "Q5_0", "Q8_0", "Q8_0", 0.2), ("q6_k", "Q8_0", "Q8_0", "Q8_0", 0.05),
             ("q8_0", "Q8_0", "Q8_0", "Q8_0", 0.05), ("bf16", "BF16", "BF16", "BF16", 0.05)]


@pytest.mark.parametrize("scheme, q4_k, q6_k, lm_head, bound", FALLBACKS, ids=[f[0] for f in FALLBACKS])
def test_rows_the_blocks_do_not_divide_fall_back_as_in_llama_cpp(scheme, q4_k, q6_k, lm_head, bound, tmp_path):
    """Rows of 320: llama.cpp's Q4_K -> Q5_0, Q6_K -> Q8_0; rows of 80 (ffn_down): F16 for every block type."""
    path = str(tmp_path / "m.gguf")
    export_gguf(LLAMA_ODD, path, scheme)
    types = file_types(path)
    assert "output.weight" not in types and types["token_embd.weight"] == lm_head
    assert {types[f"blk.1.{name}.weight"] for name in ("attn_q", "ffn_gate", "ffn_up")} == {q4_k}
    assert types["blk.1.attn_v.weight"] == q6_k and types["blk.0.attn_v.weight"] == q4_k
    assert types["blk.1.ffn_down.weight"] == ("BF16" if scheme == "bf16" else "F16")
    assert types["blk.1.attn_norm.weight"] == "F32"
    assert 0 < rms_rel(file_logits(path), source_logits(LLAMA_ODD)) < bound


def test_fallback_types_are_llama_cpps():
    """llama.cpp's llama_tensor_get_type on rows its type's blocks do not divide."""
    assert [fallback_type(Q[name], 640).name for name in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "BF16")] == \
        ["Q4_0", "Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q8_0", "BF16"]
    assert [fallback_type(Q[name], 80).name for name in ("Q4_K", "Q5_K", "Q6_K", "Q8_0")] == ["F16"] * 4
    assert [fallback_type(Q[name], 512).name for name in ("Q4_K", "Q5_K", "Q6_K")] == ["Q4_K", "Q5_K", "Q6_K"]


def test_qwen3_next_types(tmp_path):
    """attn_qkv Q5_K (llama.cpp's attn_qkv rule), attn_gate / ssm_ba / ssm_out / shared gate and up Q4_K,
    ffn_down_shexp as ffn_down, F32 for the routers and the conv kernel; the MTP block is block 4."""
    path = str(tmp_path / "m.gguf")
    export_gguf(QWEN3_NEXT, path, "q4_k_m")
    types = file_types(path)
    assert {types[f"blk.0.{n}.weight"] for n in ("attn_gate", "ssm_ba", "ssm_out", "ffn_gate_shexp", "ffn_up_shexp",
                                                  "ffn_gate_exps", "ffn_up_exps")} == {"Q4_K"}
    assert types["blk.0.attn_qkv.weight"] == "Q5_K"
    assert {types[f"blk.{i}.{n}.weight"] for i in (0, 3) for n in ("ssm_conv1d", "ffn_gate_inp", "ffn_gate_inp_shexp")
            if f"blk.{i}.{n}.weight" in types} == {"F32"}
    assert [types[f"blk.{i}.ffn_down_shexp.weight"] for i in range(5)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K", "Q6_K"]
    assert types["blk.3.attn_v.weight"] == "Q4_K" and types["blk.4.attn_v.weight"] == "Q6_K"  # 1st and 2nd of 2
    assert types["blk.4.nextn.eh_proj.weight"] == "Q4_K" and types["blk.0.ssm_a"] == "F32"


# ---- values ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [QWEN3_MOE.format(layers=2), QWEN3_NEXT, LLAMA_ODD], ids=["qwen3moe", "qwen3next",
                                                                                              "llama"])
def test_f32_round_trip_gives_the_source_models_logits(spec, tmp_path):
    """llama.cpp's transforms (q/k permutation, experts split, qkvz split, norm + 1, ...) and the reader's
    inverses, exactly; the source model's MTP head comes back too."""
    path = str(tmp_path / "m.gguf")
    export_gguf(spec, path, "f32", seed=3)
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    source = build_model(open_source(spec), "cpu", "float32", seed=3, quiet=True)
    assert torch.equal(prompt_logits(model, IDS), prompt_logits(source, IDS))
    assert sorted(model.state_dict()) == sorted(source.state_dict())


@pytest.fixture(scope="module")
def qwen3_5_moe_folder(tmp_path_factory) -> str:
    """The tiny Qwen3.5 MoE (2 key heads, 4 value heads) with an MTP head, vocabulary widened to hold the synthetic
    tokenizer's 259 byte and special tokens."""
    config = hf_config("qwen3_5_moe")
    config.vocab_size = 320
    torch.manual_seed(0)
    folder = str(tmp_path_factory.mktemp("hf-qwen3_5_moe"))
    transformers.Qwen3_5MoeForCausalLM(config).save_pretrained(folder)
    add_random_mtp(folder)
    return folder


def test_qwen3_5_value_heads_are_tiled_once(qwen3_5_moe_folder, tmp_path):
    """HF folder -> F32 file: the folder's logits (the model reads the tiled heads); that file -> F32 again: the
    same tensors (its source is already tiled); the memory plan of the folder in a scheme is the file's."""
    first, second = str(tmp_path / "first.gguf"), str(tmp_path / "second.gguf")
    export_gguf(qwen3_5_moe_folder, first, "f32")
    model = build_model(GGUFSource(first), "cpu", "float32", quiet=True)
    assert model.config.linear_value_heads_tiled and model.has_mtp
    expected = prompt_logits(build_model(HFSource(qwen3_5_moe_folder), "cpu", "float32", quiet=True), IDS)
    assert ((prompt_logits(model, IDS) - expected).abs().max() / expected.abs().max()).item() < 1e-5
    export_gguf(first, second, "f32")
    tensors = [{t.name: t.data for t in gguf.GGUFReader(p).tensors} for p in (first, second)]
    assert tensors[0].keys() == tensors[1].keys() and "blk.4.nextn.eh_proj.weight" in tensors[0]
    for name, data in tensors[0].items():
        assert np.array_equal(tensors[1][name], data), name
    q8 = str(tmp_path / "q8.gguf")
    export_gguf(qwen3_5_moe_folder, q8, "q8_0")
    assert scheme_sizes(qwen3_5_moe_folder, "q8_0", torch.bfloat16) == GGUFSource(q8).weight_sizes(torch.bfloat16)


def test_random_qwen3_6_round_trip(tmp_path):
    """A built Qwen3.6 model's split Gated DeltaNet projections go out under HF's four names and come back
    tiled: the source model's logits (to float32 summation order), its MTP head, the planned sizes."""
    path = str(tmp_path / "m.gguf")
    export_gguf(QWEN3_6, path, "f32", seed=3)
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    assert model.config.linear_value_heads_tiled and model.has_mtp
    assert {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight", "blk.0.ssm_alpha.weight",
            "blk.4.nextn.eh_proj.weight"} <= set(file_types(path))
    expected = prompt_logits(build_model(open_source(QWEN3_6), "cpu", "float32", seed=3, quiet=True), IDS)
    assert ((prompt_logits(model, IDS) - expected).abs().max() / expected.abs().max()).item() < 1e-5
    q4 = str(tmp_path / "q4.gguf")
    export_gguf(QWEN3_6, q4, "q4_k_m")
    assert scheme_sizes(QWEN3_6, "q4_k_m", torch.bfloat16) == GGUFSource(q4).weight_sizes(torch.bfloat16)


def test_random_qwen4exp_round_trip(tmp_path):
    """A built Qwen4-Exp model (no PLE hash buffers: the writer derives them from the config) goes out as
    llama.cpp's qwen4exp and comes back: the source model's logits over a prompt past the QSA budget with EOS
    tokens (to float32 summation order: the tiled value heads), its MTP head, the n-gram table kept as the
    file's blocks, the planned sizes."""
    ids = IDS + [2, 9, 2, 33, 44, 55, 66, 77, 88, 99]
    path = str(tmp_path / "m.gguf")
    export_gguf(QWEN4EXP, path, "f32", seed=3)
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    assert model.has_mtp and type(model.model.layers[0].ple.ple_embedding.ngram_embedding).__name__ == "PackedEmbedding"
    assert {"per_layer_token_embd.weight", "output_hc_norm.weight", "blk.3.indexer.q_proj.weight",
            "blk.4.nextn.eh_proj.weight", "blk.4.nextn.hc_head_up.weight"} <= set(file_types(path))
    expected = prompt_logits(build_model(open_source(QWEN4EXP), "cpu", "float32", seed=3, quiet=True), ids)
    assert ((prompt_logits(model, ids) - expected).abs().max() / expected.abs().max()).item() < 1e-5
    q8 = str(tmp_path / "q8.gguf")
    export_gguf(QWEN4EXP, q8, "q8_0")
    assert scheme_sizes(QWEN4EXP, "q8_0", torch.bfloat16) == GGUFSource(q8).weight_sizes(torch.bfloat16)


@pytest.mark.parametrize("scheme, bound", [("q8_0", 0.05), ("q4_k_m", 0.35), ("q3_k_m", 0.6), ("q2_k", 1.1)])
@pytest.mark.parametrize("spec", [QWEN3_MOE.format(layers=2), QWEN3_NEXT], ids=["qwen3moe", "qwen3next"])
def test_quantized_logits_are_close_to_the_source_models(spec, scheme, bound, tmp_path):
    """Relative RMS error of the logits: weights off by ~0.6% RMS (Q8_0) or ~5-8% (Q4_K) move these random
    models' logits by ~2-3% and ~20% (measured: 1.3% logits for 0.4% gaussian weight noise); Q3_K's ~15 % and
    Q2_K's ~33 % by 25-47 % and 48-88 % (measured). Logits of unrelated weights are ~141 % off."""
    path = str(tmp_path / "m.gguf")
    export_gguf(spec, path, scheme)
    err = rms_rel(file_logits(path), source_logits(spec))
    assert 0 < err < bound


# ---- tokenizers --------------------------------------------------------------------------------------

def test_random_shape_gets_a_synthetic_tokenizer(tmp_path, moe_spec):
    """Exactly vocab_size tokens; the config's EOS id where it fits (Qwen's 151645 does not in 512: the top id)."""
    path = str(tmp_path / "m.gguf")
    assert export_gguf(moe_spec, path, "q8_0").tokenizer == "synthetic byte-level BPE of 512 tokens"
    tokenizer = load_tokenizer(path)
    assert len(tokenizer) == 512 and tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 511
    assert GGUFSource(path).model_config().eos_token_ids == (511,)
    for text in ("Hello the world, this is it!", "naïve café: 12 + 34 = 46 🙂\n\tdef f(self): return None"):
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text and max(ids) < 512
    assert len(tokenizer.encode(" the world")) < len(" the world")  # some merges
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_synthetic_vocabulary_keeps_the_configs_special_ids():
    vocab = synthetic_vocab({"vocab_size": 300, "eos_token_id": 2, "bos_token_id": [1]})
    assert len(vocab.tokens) == len(set(vocab.tokens)) == 300
    assert vocab.tokens[2] == "<|im_end|>" and vocab.tokens[1] == "<|endoftext|>"
    assert vocab.special_ids == {"eos": 2, "bos": 1} and len(vocab.merges) == 300 - 259
    with pytest.raises(ValueError, match="vocab_size 258 is too small for a byte-level vocabulary"):
        synthetic_vocab({"vocab_size": 258})


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> str:
    """A tiny Qwen3 HF folder with a Qwen2-style byte-level BPE tokenizer.json (NFC, Qwen's split regex,
    ChatML special tokens, one user-defined token) over the synthetic vocabulary, padded to vocab_size."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    folder = str(tmp_path_factory.mktemp("hf-qwen3"))
    vocab = synthetic_vocab({"vocab_size": 320})
    normal = [t for t, kind in zip(vocab.tokens, vocab.token_types) if kind == gguf.TokenType.NORMAL]
    backend = Tokenizer(BPE({t: i for i, t in enumerate(normal)}, [tuple(m.split(" ")) for m in vocab.merges]))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZERS["qwen2"].splits[0]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    backend.add_tokens([AddedToken("<think>", special=False)])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template="{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    tokenizer.save_pretrained(folder)
    config = transformers.Qwen3Config(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256, tie_word_embeddings=False, eos_token_id=288)
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder


TEXTS = ("Hello the world, this is it!", "naïve café 12345 🙂", "<|im_start|>user\nhi<think><|im_end|>")


def test_hf_folder_tokenizer_is_converted(hf_folder, tmp_path):
    path = str(tmp_path / "m.gguf")
    assert export_gguf(hf_folder, path, "f32").tokenizer == f"converted from {hf_folder}/tokenizer.json"
    ours, theirs = load_tokenizer(path), transformers.AutoTokenizer.from_pretrained(hf_folder)
    assert len(ours) == 384 and ours.eos_token == "<|im_end|>" and ours.pad_token == "<|endoftext|>"
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text)
        assert ours.decode(ours.encode(text)) == text
    messages = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(messages, tokenize=False) == theirs.apply_chat_template(messages, tokenize=False)
    # the HF source streams tensor by tensor; F32 gives Strata's load of the folder exactly
    expected = prompt_logits(build_model(HFSource(hf_folder), "cpu", "float32", quiet=True), IDS)
    assert torch.equal(file_logits(path), expected)


def test_gguf_source_tokenizer_and_weights_are_copied(hf_folder, tmp_path):
    """Q8_0 file -> F32 file: the tokenizer metadata key for key, the packed weights dequantized exactly."""
    first, second = str(tmp_path / "q8.gguf"), str(tmp_path / "f32.gguf")
    export_gguf(hf_folder, first, "q8_0")
    assert export_gguf(first, second, "f32").tokenizer == f"copied from {first}"
    fields = [{name: f.contents() for name, f in gguf.GGUFReader(p).fields.items() if name.startswith("tokenizer.")}
              for p in (first, second)]
    assert fields[0] == fields[1] and len(fields[0]["tokenizer.ggml.tokens"]) == 384
    assert set(file_types(second).values()) == {"F32"}
    torch.testing.assert_close(file_logits(second), file_logits(first), rtol=0, atol=1e-5)


# ---- CLI and errors -----------------------------------------------------------------------------------

def test_cli_writes_the_file_and_says_what_it_wrote(tmp_path, capsys, moe_spec):
    path = str(tmp_path / "m.gguf")
    assert main(["quantize", moe_spec, path, "--scheme", "Q8_0", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {path}: q8_0, 27 tensors" in out and "Q8_0 16 (" in out and "F32 11 (" in out
    assert "tokenizer: synthetic byte-level BPE of 512 tokens" in out
    source = build_model(open_source(moe_spec), "cpu", "float32", seed=1, quiet=True)
    assert rms_rel(file_logits(path), prompt_logits(source, IDS)) < 0.05  # --seed reached the model


def test_bad_scheme_and_unwritable_specs_are_named(tmp_path, capsys, moe_spec):
    with pytest.raises(ValueError, match=r"unknown quantization scheme 'q5_k_s'; choose one of: q2_k, q3_k_m, "
                                         r"q4_k_m, q6_k, q8_0, mxfp4_moe, iq4_xs, iq3_xxs, iq2_xxs, f16, bf16, f32"):
        export_gguf(moe_spec, str(tmp_path / "m.gguf"), "q5_k_s")
    assert main(["quantize", moe_spec, str(tmp_path / "m.gguf"), "--scheme", "q3"]) == 2
    assert "strata: error: unknown quantization scheme 'q3'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="routing_skew is a bias on the router's logits, which a GGUF file cannot hold"):
        export_gguf(moe_spec + "&routing_skew=1", str(tmp_path / "m.gguf"))
    assert SCHEME_NAMES == tuple(SCHEMES)  # the CLI's copy of the names (it must not import torch to list them)
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    assert "q4_k_m, q6_k, q8_0, mxfp4_moe, iq4_xs, iq3_xxs, iq2_xxs, f16, bf16, f32" in \
        " ".join(capsys.readouterr().out.split())
