"""GGUF weights that stay packed (strata.model.packed): each kept type loads as PackedWeights over the
file and gives the logits of the same file loaded dequantized; llama.cpp's row permutations and joins run
on packed rows; other types load dequantized with one notice per type; bad files name the file and the
tensor; a split GGUF loads like one file; ops.packed_linear's choice of kernel or reference."""

from __future__ import annotations

import os
import re

import gguf
import numpy as np
import pytest
import torch
import transformers

from gguf_writer import write_gguf
from strata.kernels.gguf_blocks import PACKED_TYPE_NAMES, dequantize_ref, packed_matmul_ref
from strata.model import cpu_ops, ops
from strata.model.packed import PackedEmbedding, PackedWeight
from strata.weights import gguf_source
from strata.weights.gguf_source import GGUFSource
from strata.weights.loader import build_model
from tiny_models import build_hf_model, hf_state, prompt_logits

Q = gguf.GGMLQuantizationType
IDS = [5, 17, 99, 3, 42, 150, 8, 77, 61, 12, 130, 64]


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max()).item()


@pytest.fixture(scope="module")
def llama_256():
    """A tiny llama whose rows are whole superblocks (256 values) for the K and IQ types, with biases."""
    config = transformers.LlamaConfig(
        vocab_size=160, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, rope_theta=10000.0, attention_bias=True)
    torch.manual_seed(0)
    return hf_state(transformers.LlamaForCausalLM(config).eval())


def load(path: str, packed: bool = True, dtype: str = "float32"):
    with pytest.MonkeyPatch.context() as patch:
        if not packed:
            patch.setattr(gguf_source, "keeps_blocks", lambda name, qtype: False)
        return build_model(GGUFSource(path), "cpu", dtype, quiet=True)


def qtype_names(weight: PackedWeight) -> list[str]:
    return [Q(q).name for q in weight.qtypes]


@pytest.mark.parametrize("quant", PACKED_TYPE_NAMES)
def test_kept_types_load_packed_and_match_the_dequantized_load(quant, llama_256, tmp_path):
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *llama_256, quant=quant)
    packed, dense = load(path), load(path, packed=False)
    layer = packed.model.layers[0]
    assert qtype_names(layer.self_attn.qkv_proj.weight) == [quant] * 3  # q, k, v: one segment each
    for module in (layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj, packed.lm_head):
        assert isinstance(module.weight, PackedWeight) and set(qtype_names(module.weight)) == {quant}
    assert layer.self_attn.qkv_proj.bias is not None  # the biases (F32) stay dense beside the blocks
    assert isinstance(packed.model.embed_tokens, PackedEmbedding)
    assert isinstance(dense.model.layers[0].self_attn.qkv_proj.weight, torch.nn.Parameter)
    torch.testing.assert_close(layer.self_attn.qkv_proj.weight.dequantize(),
                               dense.model.layers[0].self_attn.qkv_proj.weight, rtol=0, atol=0)
    expected = prompt_logits(dense, IDS)
    assert torch.isfinite(expected).all()
    assert rel_err(prompt_logits(packed, IDS), expected) < 1e-5


def test_fused_parts_of_different_types_and_rope_rows(llama_256, tmp_path):
    """q, k and v of three types (q and k rows permuted by llama.cpp), gate and up of two."""
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *llama_256, quant="Q4_1", types={r"attn_q\.": "Q8_0", r"attn_k\.": "Q4_K", r"attn_v\.": "Q6_K",
                                                      r"ffn_up": "IQ4_XS"})
    packed, dense = load(path), load(path, packed=False)
    layer = packed.model.layers[1]
    assert qtype_names(layer.self_attn.qkv_proj.weight) == ["Q8_0", "Q4_K", "Q6_K"]
    assert qtype_names(layer.mlp.gate_up_proj.weight) == ["Q4_1", "IQ4_XS"]
    assert rel_err(prompt_logits(packed, IDS), prompt_logits(dense, IDS)) < 1e-5


def test_qwen3_next_joins_qkvz_on_packed_rows(tmp_path):
    """attn_qkv and attn_gate interleave into in_proj_qkvz row by row; the shared expert is packed, the
    router and the routed experts stay dense."""
    cfg, state = hf_state(build_hf_model("qwen3_next"))
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, quant="Q8_0")
    packed, dense = load(path), load(path, packed=False)
    linear_attn, mlp = packed.model.layers[0].linear_attn, packed.model.layers[0].mlp
    assert qtype_names(linear_attn.in_proj_qkvz.weight) == ["Q8_0"]  # one segment: the interleave copied rows
    assert isinstance(mlp.shared_expert.gate_up_proj.weight, PackedWeight)
    assert isinstance(mlp.gate.weight, torch.nn.Parameter) and isinstance(mlp.experts.w13, torch.Tensor)
    torch.testing.assert_close(linear_attn.in_proj_qkvz.weight.dequantize(),
                               dense.model.layers[0].linear_attn.in_proj_qkvz.weight, rtol=0, atol=0)
    assert rel_err(prompt_logits(packed, IDS), prompt_logits(dense, IDS)) < 1e-5


def test_qwen3_5_split_projections_load_packed_into_the_fused_ones(tmp_path):
    """Qwen3.5's four Gated DeltaNet tensors (attn_qkv, attn_gate, ssm_beta, ssm_alpha) stay packed, joined
    as the shards of in_proj_qkvz / in_proj_ba, and give the dequantized load's logits."""
    cfg, state = hf_state(build_hf_model("qwen3_5_moe"))
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, quant="Q8_0")
    packed, dense = load(path), load(path, packed=False)
    linear_attn = packed.model.layers[0].linear_attn
    assert qtype_names(linear_attn.in_proj_qkvz.weight) == ["Q8_0"] * 2  # [qkv | z]: two segments, one type
    assert qtype_names(linear_attn.in_proj_ba.weight) == ["Q8_0"] * 2
    torch.testing.assert_close(linear_attn.in_proj_qkvz.weight.dequantize(),
                               dense.model.layers[0].linear_attn.in_proj_qkvz.weight, rtol=0, atol=0)
    assert rel_err(prompt_logits(packed, IDS), prompt_logits(dense, IDS)) < 1e-5


def test_qkvz_parts_of_two_types_stay_packed_with_their_columns_gathered(tmp_path, caplog):
    """attn_qkv and attn_gate of two types (a Q4_K_M file's Q5_K and Q4_K) cannot be one segment in HF's
    interleaved row order: they stay two segments in the file's order, and the product's columns are gathered
    into HF's. Same weights and logits as the dequantized load, no notice, the loaded sizes count their blocks."""
    cfg, state = hf_state(build_hf_model("qwen3_next"))
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, quant="Q8_0", types={r"attn_gate": "Q4_0"})
    packed, dense = load(path), load(path, packed=False)
    weight = packed.model.layers[0].linear_attn.in_proj_qkvz.weight
    assert isinstance(weight, PackedWeight) and qtype_names(weight) == ["Q8_0", "Q4_0"] and weight.reorders
    assert not [r for r in caplog.records if r.name == gguf_source.__name__ and "qkvz" in r.getMessage()]
    torch.testing.assert_close(weight.dequantize(), dense.model.layers[0].linear_attn.in_proj_qkvz.weight,
                               rtol=0, atol=0)
    x = torch.randn(3, weight.in_features)
    torch.testing.assert_close(ops.packed_linear(x, weight), x @ weight.dequantize().T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.packed_linear(x.unsqueeze(0), weight, out_dtype=torch.float32)[0],
                               x @ weight.dequantize().T, rtol=1e-5, atol=1e-5)  # the reshaping path
    assert rel_err(prompt_logits(packed, IDS), prompt_logits(dense, IDS)) < 1e-5
    from strata.weights.loaded_sizes import loaded_sizes

    qkvz = [e for e in GGUFSource(path)._entries() if e.hf_name.endswith("in_proj_qkvz.weight")]
    assert {e.qtype for e in qkvz} == {Q.Q8_0, Q.Q4_0}
    packed_bytes = sum(e.nbytes for e in qkvz)
    assert loaded_sizes(qkvz, torch.float32, False).total == packed_bytes < sum(e.num_values for e in qkvz) * 4


def test_a_reordered_weight_gathers_its_columns_and_its_embedding_rows():
    """PackedWeight.reordered: products over the stored rows then the columns in order, dequantize in order,
    an embedding's ids mapped through the order, and orders compose."""
    from gguf_writer import random_blocks

    rng = np.random.default_rng(0)
    a = PackedWeight(torch.from_numpy(random_blocks((4, 64), Q.Q8_0, rng, scale=1e-2)), Q.Q8_0, 64)
    b = PackedWeight(torch.from_numpy(random_blocks((2, 64), Q.Q4_0, rng, scale=1e-2)), Q.Q4_0, 64)
    joined = PackedWeight.cat_rows([a, b])
    order = torch.tensor([4, 0, 1, 5, 2, 3])
    weight = joined.reordered(order)
    expected = joined.dequantize()[order]
    torch.testing.assert_close(weight.dequantize(), expected, rtol=0, atol=0)
    x = torch.randn(2, 64)
    torch.testing.assert_close(ops.packed_linear(x, weight), x @ expected.T, rtol=1e-5, atol=1e-6)
    again = weight.reordered(torch.tensor([5, 4, 3, 2, 1, 0]))
    torch.testing.assert_close(again.dequantize(), expected.flip(0), rtol=0, atol=0)
    with pytest.raises(ValueError, match="reordered"):
        weight.take_rows(torch.arange(6))
    with pytest.raises(ValueError, match="row order"):
        joined.reordered(torch.arange(5))
    single = PackedWeight(a.blocks, Q.Q8_0, 64).reordered(torch.tensor([3, 2, 1, 0]))
    rows = ops.packed_embedding(single, torch.tensor([0, 2]), torch.float32)
    torch.testing.assert_close(rows, a.dequantize()[[3, 1]], rtol=0, atol=0)


def test_other_types_load_dequantized_with_one_notice_each(llama_256, tmp_path, caplog):
    """TQ2_0 weights (ternary; no kernel reads them) load dequantized, with one notice for all of them; IQ4_NL ones
    beside them stay packed."""
    cfg, state = llama_256
    path = str(tmp_path / "model.gguf")
    write_gguf(path, cfg, state, quant="TQ2_0", types={r"ffn_down": "IQ4_NL"})
    model = load(path)
    lines = [r.getMessage() for r in caplog.records if r.name == gguf_source.__name__]
    reader = gguf.GGUFReader(path)
    count = sum(t.tensor_type == Q.TQ2_0 for t in reader.tensors)
    kept = ", ".join(PACKED_TYPE_NAMES)
    assert lines == [f"loaded {count} tensors of type TQ2_0 dequantized to float32: not kept packed "
                     f"(types kept packed: {kept})"]
    o_proj = model.model.layers[0].self_attn.o_proj.weight
    assert isinstance(o_proj, torch.nn.Parameter)
    stored = next(t for t in reader.tensors if t.name == "blk.0.attn_output.weight")
    assert torch.equal(o_proj, torch.from_numpy(gguf.quants.dequantize(stored.data, Q.TQ2_0)))
    assert isinstance(model.model.layers[0].mlp.down_proj.weight, PackedWeight)


def test_bundled_model_loads_packed_from_the_file_map(bundled_gguf, capsys):
    source = GGUFSource(bundled_gguf)
    assert "tokenizer.ggml.tokens" not in source.reader.fields  # ~150 MiB of parsed vocabulary freed
    model = build_model(source, "cpu", "float32")
    assert re.search(r"loaded LlamaForCausalLM \(134\.5M parameters, float32, 134\.5M of them packed in 9\d MiB\)",
                     capsys.readouterr().err)
    qkv = model.model.layers[0].self_attn.qkv_proj.weight
    assert qtype_names(qkv) == ["Q4_1"] * 3
    file_map = source.reader.data
    start, end = file_map.ctypes.data, file_map.ctypes.data + file_map.nbytes
    in_file = [start <= blocks.data_ptr() < end for _, blocks in qkv.segments()]
    assert in_file == [False, False, True]  # q and k: rows permuted (copied); v: a view of the file
    embed = model.model.embed_tokens
    assert isinstance(embed, PackedEmbedding) and qtype_names(embed.weight) == ["Q8_0"]
    assert model.lm_head.weight is embed.weight  # tied: the LM head reads the embedding's blocks
    packed = {id(m): m for m in model.modules() if isinstance(m, PackedWeight)}
    tensor_bytes = sum(t.n_bytes for t in source.reader.tensors if t.tensor_type in (Q.Q4_1, Q.Q8_0))
    assert sum(w.nbytes for w in packed.values()) == tensor_bytes


# ---- bad files ---------------------------------------------------------------------------------------

def tiny_gguf(tmp_path, quant: str = "Q4_1") -> str:
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *hf_state(build_hf_model("llama")), quant=quant)
    return path


def patch_tensor_info(path: str, name: str, dims: list[int] | None = None, type_id: int | None = None) -> None:
    """Rewrite a tensor's dims or type in the GGUF header (name, n_dims u32, dims u64 x n, type u32)."""
    data = bytearray(open(path, "rb").read())
    at = data.index(name.encode()) + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    if dims is not None:
        data[at + 4:at + 4 + 8 * n_dims] = b"".join(d.to_bytes(8, "little") for d in dims)
    if type_id is not None:
        data[at + 4 + 8 * n_dims:at + 8 + 8 * n_dims] = type_id.to_bytes(4, "little")
    open(path, "wb").write(bytes(data))


def test_truncated_file_names_the_file_and_the_tensor(tmp_path):
    path = tiny_gguf(tmp_path)
    data = open(path, "rb").read()
    kept = int(len(data) * 0.9)
    open(path, "wb").write(data[:kept])
    with pytest.raises(ValueError, match=rf"{re.escape(path)} is truncated or corrupt: tensor '[\w.]+' ends at byte "
                                         rf"[\d,]+ but the file has {kept:,} bytes; download or convert"):
        GGUFSource(path)


def test_row_that_is_not_whole_blocks_names_the_file_and_the_tensor(tmp_path):
    path = tiny_gguf(tmp_path)
    patch_tensor_info(path, "blk.1.attn_q.weight", dims=[48, 64])
    with pytest.raises(ValueError, match=rf"{re.escape(path)}: tensor 'blk.1.attn_q.weight' \(Q4_1, shape \[48, 64\]\) "
                                         r"has rows of 48 values, not a whole number of Q4_1 blocks of 32"):
        GGUFSource(path)


def test_unknown_type_names_the_file_and_the_tensor(tmp_path):
    path = tiny_gguf(tmp_path)
    patch_tensor_info(path, "blk.0.ffn_up.weight", type_id=99)
    with pytest.raises(ValueError, match=rf"{re.escape(path)}: tensor 'blk.0.ffn_up.weight' has GGML type id 99, "
                                         r"which the installed gguf package does not know"):
        GGUFSource(path)


# ---- split files -------------------------------------------------------------------------------------

def test_split_gguf_loads_like_one_file(tmp_path):
    cfg, state = hf_state(build_hf_model("llama"))
    whole = str(tmp_path / "model.gguf")
    write_gguf(whole, cfg, state, quant="Q4_1")
    (tmp_path / "split").mkdir()
    parts = write_gguf(str(tmp_path / "split" / "model.gguf"), cfg, state, quant="Q4_1", split_max_tensors=12)
    assert len(parts) > 2 and parts[0].endswith(f"model-00001-of-{len(parts):05d}.gguf")
    expected = prompt_logits(load(whole), IDS)
    for path in (parts[0], parts[-1]):  # any part names the model
        source = GGUFSource(path)
        assert source.model_config() == GGUFSource(whole).model_config()
        assert len(source.readers) == len(parts) and source.num_tensors() == GGUFSource(whole).num_tensors()
        assert torch.equal(prompt_logits(build_model(source, "cpu", "float32", quiet=True), IDS), expected)


def test_split_gguf_with_a_missing_part_names_it(tmp_path):
    cfg, state = hf_state(build_hf_model("llama"))
    parts = write_gguf(str(tmp_path / "model.gguf"), cfg, state, quant="Q4_1", split_max_tensors=12)
    os.remove(parts[1])
    with pytest.raises(ValueError, match=rf"{re.escape(parts[0])} is one of {len(parts)} parts of a split GGUF, but "
                                         rf"{re.escape(parts[1])} is missing; download every part"):
        GGUFSource(parts[0])


# ---- the packed weight and its ops ---------------------------------------------------------------------

def packed_of(name: str, rows: int, k: int, seed: int = 0) -> PackedWeight:
    values = np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)
    return PackedWeight(torch.from_numpy(gguf.quants.quantize(values, Q[name])), Q[name], k)


def test_cat_rows_keeps_segments_and_take_rows_copies():
    a, b = packed_of("Q8_0", 5, 64), packed_of("Q4_0", 3, 64, seed=1)
    joined = PackedWeight.cat_rows([a, b])
    assert joined.shape == (8, 64) and joined.nbytes == a.nbytes + b.nbytes == 5 * 68 + 3 * 36
    assert [blocks.data_ptr() for _, blocks in joined.segments()] == [a.blocks.data_ptr(), b.blocks.data_ptr()]
    assert torch.equal(joined.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))
    assert joined.dequantize(torch.bfloat16).dtype == torch.bfloat16
    order = torch.tensor([4, 0, 2])
    assert torch.equal(a.take_rows(order).dequantize(), a.dequantize()[order])
    with pytest.raises(ValueError, match="different types"):
        joined.take_rows(order)
    with pytest.raises(ValueError, match="2 segments"):
        joined.blocks  # noqa: B018


def test_runs_of_one_type_join_into_one_segment():
    """What _install_packed does on the GPU: q and k of one type (Q4_K_M's attn_q and attn_k) become one
    segment, v of another stays apart; the rows, their order and their bytes are unchanged."""
    q, k, v = packed_of("Q8_0", 4, 256), packed_of("Q8_0", 2, 256, seed=1), packed_of("Q4_0", 2, 256, seed=2)
    fused = PackedWeight.cat_rows([q, k, v])
    joined = fused.with_runs_joined()
    assert qtype_names(joined) == ["Q8_0", "Q4_0"] and joined.shape == fused.shape == (8, 256)
    assert torch.equal(joined.segments()[0][1], torch.cat([q.blocks, k.blocks]))
    assert joined.segments()[1][1].data_ptr() == v.blocks.data_ptr()
    assert torch.equal(joined.dequantize(), fused.dequantize())
    assert q.with_runs_joined() is q and PackedWeight.cat_rows([q, v]).with_runs_joined().qtypes == fused.qtypes[1:]


def test_norms_before_packed_weights_are_marked_to_round_for_them(llama_256, tmp_path):
    """Each layer's two norms feed packed projections in a packed load (their launch then rounds the rows
    for packed_q8 on CUDA), and nothing in a dense load; the marks do not change the CPU numbers."""
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *llama_256, quant="Q8_0")
    packed, dense = load(path), load(path, packed=False)
    for model, marked in ((packed, True), (dense, False)):
        for layer in model.model.layers:
            assert layer.input_layernorm.feeds_packed is marked
            assert layer.post_attention_layernorm.feeds_packed is marked
    assert packed.model.norm.feeds_packed is False  # the LM head reads gathered rows: no mark
    assert rel_err(prompt_logits(packed, IDS), prompt_logits(dense, IDS)) < 1e-5


class FakeKernel:
    """strata.kernels.cpu_quant's interface, recording its calls and answering with the reference."""

    def __init__(self, supported: set[int]) -> None:
        self.supported, self.calls = supported, []

    def supports(self, qtype: int) -> bool:
        return qtype in self.supported

    def quant_matmul(self, x, blocks, qtype, n, k):
        self.calls.append((x.dtype, x.is_contiguous(), blocks.data_ptr(), qtype, n, k))
        return packed_matmul_ref(x, blocks, qtype, k)


def test_packed_linear_takes_the_int8_kernel_for_16_bit_inputs_only(monkeypatch):
    """16-bit inputs: the int8-activation kernel where it reads the segment's type, else the reference.
    float32 inputs never take it (they take dequant_matmul, tests/kernels/test_cpu_dequant_matmul.py)."""
    weight = PackedWeight.cat_rows([packed_of("Q4_1", 6, 64), packed_of("Q8_0", 4, 64, seed=2)])
    kernel = FakeKernel({int(Q.Q4_1)})
    monkeypatch.setattr(cpu_ops, "native_quant", lambda: kernel)
    x = torch.randn(3, 64)
    bias = torch.randn(10)
    expected = x @ weight.dequantize().t() + bias
    out = ops.packed_linear(x, weight, bias)
    assert kernel.calls == [] and out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
    out = ops.packed_linear(x.to(torch.bfloat16).t().contiguous().t(), weight, bias.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and out.shape == (3, 10)
    # the Q4_1 segment went to the kernel (float32, contiguous); the Q8_0 one, unsupported, to the reference
    assert kernel.calls == [(torch.float32, True, weight.segments()[0][1].data_ptr(), int(Q.Q4_1), 6, 64)]
    logits = ops.packed_linear(x.to(torch.bfloat16), weight, out_dtype=torch.float32)
    assert logits.dtype == torch.float32


def test_packed_embedding_gathers_rows_then_dequantizes():
    weight = packed_of("Q4_0", 20, 96)
    ids = torch.tensor([3, 3, 19, 0])
    rows = ops.packed_embedding(weight, ids, torch.float32)
    assert torch.equal(rows, dequantize_ref(weight.blocks, weight.qtype, 96)[ids])
    assert PackedEmbedding(weight, torch.bfloat16)(ids).dtype == torch.bfloat16


def test_no_cpu_quant_switch_takes_the_reference(monkeypatch):
    cpu_ops.native_quant.cache_clear()
    monkeypatch.setenv("STRATA_NO_CPU_QUANT", "1")
    try:
        assert cpu_ops.native_quant() is None
    finally:
        cpu_ops.native_quant.cache_clear()


@pytest.mark.gpu
def test_norms_rounding_for_packed_weights_give_their_bits_on_cuda(llama_256, tmp_path):
    """On CUDA a marked norm's launch rounds its rows for packed_q8 (no quantize launch of the projection's
    own): each projection after it returns the bits it returns when it quantizes its input itself."""
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *llama_256, quant="Q8_0", types={r"attn_v\.": "Q4_0"})
    model = build_model(GGUFSource(path), "cuda", "bfloat16", quiet=True)
    layer = model.model.layers[0]
    assert qtype_names(layer.self_attn.qkv_proj.weight) == ["Q8_0", "Q4_0"]  # q and k joined on the device
    gen = torch.Generator().manual_seed(0)
    hidden, residual = (torch.randn(5, 256, generator=gen).to(torch.bfloat16).cuda() for _ in range(2))
    outs = {}
    with torch.inference_mode():
        for marked in (True, False):
            layer.input_layernorm.feeds_packed = layer.post_attention_layernorm.feeds_packed = marked
            x, res = layer.input_layernorm(hidden, residual)
            assert hasattr(x, "q8_rows") is marked
            y, _ = layer.post_attention_layernorm(x, res)
            outs[marked] = (layer.self_attn.qkv_proj(x), layer.mlp(y))
    for fused, alone in zip(outs[True], outs[False]):
        assert torch.equal(fused, alone)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 2, 40])
def test_a_reordered_weight_on_cuda(rows):
    """A reordered weight of two types on the device (its order moved with it) through each CUDA path of
    packed_linear: the 8-bit GEMV (1-4 rows of a narrow weight), then dequantize + GEMM; against the dequantized
    weight in order."""
    from gguf_writer import random_blocks

    rng = np.random.default_rng(1)
    a = PackedWeight(torch.from_numpy(random_blocks((64, 256), Q.Q5_K, rng, scale=1e-2)), Q.Q5_K, 256)
    b = PackedWeight(torch.from_numpy(random_blocks((32, 256), Q.Q4_K, rng, scale=1e-2)), Q.Q4_K, 256)
    order = torch.randperm(96, generator=torch.Generator().manual_seed(2))
    weight = PackedWeight.cat_rows([a, b]).reordered(order).to("cuda")
    assert weight.output_order.is_cuda and weight.reorders
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).cuda()
    expected = x.float() @ weight.dequantize().float().T
    assert rel_err(ops.packed_linear(x, weight).float(), expected) < 2e-2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_prompt_in_chunks_samples_where_it_ends(device, llama_256, tmp_path):
    """A prompt longer than a step's token budget runs in chunks, the first of which sample nothing: their steps
    compute no logits (a packed LM head's GPU kernels take no empty batch: session 69 found 3,900-token prompts
    failing to compile one on the 30B-A3B Q4_K_M), and the greedy tokens are the unchunked prompt's; packed_linear
    itself returns an empty product for no rows."""
    from strata import LLM, SamplingParams

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = str(tmp_path / "model.gguf")
    write_gguf(path, *llama_256, quant="Q8_0")
    dtype = "float32" if device == "cpu" else "bfloat16"
    ids = torch.randint(3, 160, (45,), generator=torch.Generator().manual_seed(5)).tolist()
    prompt = {"prompt_token_ids": ids}
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = [LLM(path, dtype=dtype, device=device, max_model_len=128, max_num_batched_tokens=budget,
                   cuda_graphs=False).generate([prompt], params)[0].outputs[0].token_ids for budget in (64, 16)]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 6
    head = build_model(GGUFSource(path), device, dtype, quiet=True).lm_head.weight
    empty = ops.packed_linear(torch.empty(0, 256, dtype=getattr(torch, dtype), device=device), head)
    assert empty.shape == (0, 160) and empty.device.type == device
