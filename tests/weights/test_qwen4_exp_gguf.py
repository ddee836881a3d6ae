"""Qwen4-Exp GGUF files (llama.cpp's `qwen4exp`) written as its converter writes them (strata.weights.gguf_writer)
load as the safetensors folder does: logits over prompts past the QSA budget and with EOS tokens (PLE's n-gram
cut) in F32 and Q8_0, the MTP head's draft logits, the n-gram table kept as the file's blocks (a PackedEmbedding
over its map) in F16, BF16, Q8_0 and IQ4_NL, the hash constants as uint64 metadata equal to HF's buffers, and
bad metadata refused with the key or tensor named before any weight loads. IQ4_NL's reference dequantization
equals gguf-py's bit for bit (the lookup-only type: tests/kernels covers the packed ones)."""

from __future__ import annotations

import json
import os
import re

import gguf
import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from gguf_writer import write_gguf
from strata.kernels.gguf_blocks import block_format, dequantize_ref, is_packed_type
from strata.model.packed import PackedEmbedding, PackedWeight
from strata.weights.gguf_source import GGUFSource
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from test_gguf import QuantizedSource, mtp_draft_logits, rel_err
from tiny_models import add_random_mtp, hf_config, prompt_logits, save_tiny_model

Q = gguf.GGMLQuantizationType
EOS = 2
TABLE = "model.layers.1.ple.ple_embedding.ngram_embedding"  # the tiny config's PLE layer is 1 (0-based)
PLE_CONV = "model.layers.1.ple.conv1d.weight"  # HF initialises it to zeros: given random values here


def prompt_with_eos(length: int = 40, seed: int = 7) -> list[int]:
    """Past the tiny QSA budget (2 blocks of 4 tokens), with EOS tokens cutting PLE's n-grams."""
    ids = torch.randint(3, 160, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
    ids[5] = ids[6] = ids[20] = EOS
    return ids


def gguf_of(folder: str, path: str, quant: str = "F32", types: dict[str, str] | None = None) -> str:
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    write_gguf(path, cfg, load_file(os.path.join(folder, "model.safetensors")), quant, types=types)
    return path


@pytest.fixture(scope="module")
def mtp_folder(tmp_path_factory) -> str:
    """The tiny qwen4_exp family with a random MTP head, as an HF folder."""
    folder = str(tmp_path_factory.mktemp("qwen4_exp-mtp"))
    save_tiny_model("qwen4_exp", folder)
    add_random_mtp(folder)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    tensors[PLE_CONV] = 0.3 * torch.randn(tensors[PLE_CONV].shape, generator=torch.Generator().manual_seed(1))
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def wide_ple_folder(tmp_path_factory) -> str:
    """The tiny qwen4_exp family with table rows of 32 values (ple_embed_dim 128 over 4 heads): whole blocks
    of every type, so the table can be Q8_0 or IQ4_NL (the tiny family's rows of 8 stay F32)."""
    config = hf_config("qwen4_exp")
    config.ple_embed_dim = 128
    torch.manual_seed(0)
    model = transformers.Qwen4ExpForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and param.dim() == 1:
                param.add_(torch.randn_like(param) * 0.1)
        model.get_parameter(PLE_CONV).normal_(0, 0.3)
    folder = str(tmp_path_factory.mktemp("qwen4_exp-wide-ple"))
    model.save_pretrained(folder)
    return folder


# ---- logits, MTP ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_gguf_model_matches_safetensors_model(quant, mtp_folder, tmp_path):
    """Q8_0: the safetensors model's tensors go through Q8_0 where the writer quantizes them (rows of whole
    blocks: the n-gram table's rows of 8 stay F32), in llama.cpp's tiled value-head order."""
    source = GGUFSource(gguf_of(mtp_folder, str(tmp_path / "model.gguf"), quant))
    from_gguf = build_model(source, "cpu", "float32", quiet=True)
    from_safetensors = build_model(QuantizedSource(HFSource(mtp_folder), quant, tiled=True), "cpu", "float32",
                                   quiet=True)
    ids = prompt_with_eos()
    assert from_gguf.model.layers[2].self_attn.indexer.is_sparse(len(ids))
    # a packed out_proj: the Gated DeltaNet's output norm rounds its rows for it on CUDA (no numbers change here)
    from strata.model.gated_delta_net import GatedDeltaNet
    gdn = [m for m in from_gguf.modules() if isinstance(m, GatedDeltaNet)]
    assert gdn and all(m.norm.feeds_packed is (quant == "Q8_0") for m in gdn)
    # the hyper-connection mixers' down and inject rows (of 128) packed on the CPU, up (rows of hc_lowrank 16) dense
    mixer = from_gguf.model.layers[0].attn_hyper_connection
    assert isinstance(mixer.input_mix_weight_down.weight, PackedWeight) is (quant == "Q8_0")
    assert isinstance(mixer.block_inject_weight.weight, PackedWeight) is (quant == "Q8_0")
    assert isinstance(mixer.input_mix_weight_up.weight, torch.Tensor)
    # Q8_0: the packed kernels sum in another order (as test_gguf's bound); a layout error moves logits by O(1)
    assert rel_err(prompt_logits(from_gguf, ids), prompt_logits(from_safetensors, ids)) < 5e-5
    assert rel_err(prompt_logits(from_gguf, ids, chunk=7), prompt_logits(from_safetensors, ids)) < 5e-5


def test_packed_mixers_on_a_gpu_model_are_dequantized_to_what_the_cpu_computes(wide_ple_folder, tmp_path,
                                                                               monkeypatch):
    """packed.dense_on_gpu's weights (hyper-connection mixers, the PLE key / value projections) stay a Q8_0 file's
    blocks on the CPU; loader.build_model on CUDA dequantizes them (_dequantize_dense_on_gpu, run here on the CPU
    model) into parameters of the model's dtype equal to the blocks' values, and the model computes the same logits
    (the CPU's exact float32 packed products against torch's linear: summation order). The CUDA plan counts them in
    that dtype. With STRATA_DENSE_MIXERS=0 they stay packed on CUDA, and the plan counts their blocks."""
    from strata.model.packed import dense_on_gpu
    from strata.weights import loader

    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), "Q8_0")
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    packed = {name: module.weight for name, module in model.named_modules()
              if isinstance(getattr(module, "weight", None), PackedWeight) and dense_on_gpu(f"{name}.weight")}
    kept = {name: weight.dequantize(torch.float32) for name, weight in packed.items()}
    assert any("ple.key_proj" in name for name in kept) and any("mix_weight_down" in name for name in kept)
    assert any("block_inject_weight" in name for name in kept)
    ids = prompt_with_eos()
    packed_logits = prompt_logits(model, ids)
    monkeypatch.setenv("STRATA_DENSE_MIXERS", "0")  # they stay packed on CUDA too, and the plan counts them so
    loader._dequantize_dense_on_gpu(model, torch.float32)
    assert all(model.get_submodule(name).weight is weight for name, weight in packed.items())
    as_blocks = GGUFSource(path).weight_sizes(torch.bfloat16).total
    monkeypatch.delenv("STRATA_DENSE_MIXERS")
    loader._dequantize_dense_on_gpu(model, torch.float32)
    for name, values in kept.items():
        weight = model.get_submodule(name).weight
        assert isinstance(weight, torch.nn.Parameter) and torch.equal(weight, values)
    assert rel_err(prompt_logits(model, ids), packed_logits) < 1e-5
    planned = GGUFSource(path).weight_sizes(torch.bfloat16).total
    assert planned - as_blocks == sum(2 * v.numel() - packed[name].nbytes for name, v in kept.items())


def test_mtp_head_loads_from_gguf(mtp_folder, tmp_path):
    """eh_proj = [fc_embedding | fc_hidden] comes back as the two projections, nextn.hc_head_* as the head's
    own mixer, nextn.enorm / hnorm (1 + w) as its norms: the draft logits of the safetensors folder's head."""
    path = gguf_of(mtp_folder, str(tmp_path / "model.gguf"))
    fields = gguf.GGUFReader(path).fields
    assert fields["qwen4exp.nextn_predict_layers"].contents() == 1 and fields["qwen4exp.block_count"].contents() == 5
    assert fields["qwen4exp.attention.compress_ratios"].contents() == [0, 0, 4, 0, 0]  # the MTP block attends densely
    # the blocks that recur, as llama.cpp's converter writes them (its loader reads them before the interval of 4,
    # which would put the tiny model's attention on block 3)
    assert fields["qwen4exp.attention.recurrent_layers"].contents() == [True, True, False, True, False]
    tensors = {t.name: tuple(int(d) for d in t.shape) for t in gguf.GGUFReader(path).tensors}
    assert tensors["blk.4.nextn.eh_proj.weight"] == (128, 64)  # [2D in, D out] in ggml's order
    from_gguf = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    from_safetensors = build_model(HFSource(mtp_folder), "cpu", "float32", quiet=True)
    assert from_gguf.has_mtp
    ids = prompt_with_eos(24, seed=3)
    assert rel_err(mtp_draft_logits(from_gguf, ids), mtp_draft_logits(from_safetensors, ids)) < 1e-5


def test_hash_constants_are_uint64_metadata_equal_to_hf_buffers(mtp_folder, tmp_path):
    fields = gguf.GGUFReader(gguf_of(mtp_folder, str(tmp_path / "model.gguf"))).fields
    hf = load_file(os.path.join(mtp_folder, "model.safetensors"))
    for key, buffer in (("layer_multipliers", "layer_multipliers"), ("head_offsets", "ngram_heads_offsets"),
                        ("head_vocab_sizes", "ngram_heads_vocab_sizes")):
        field = fields[f"qwen4exp.ple.{key}"]
        assert field.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT64]
        assert field.contents() == hf[f"model.layers.1.ple.ple_embedding.{buffer}"].tolist()
    assert fields["qwen4exp.ple.layers"].contents() == [1] and fields["qwen4exp.ple.eos_token_id"].contents() == EOS
    assert fields["qwen4exp.embedding_length_per_layer_input"].contents() == 8


# ---- the n-gram table stays the file's blocks --------------------------------------------------------

def test_cpu_matmul_auto_weighs_only_the_tensors_the_model_multiplies(wide_ple_folder, tmp_path):
    """--cpu-matmul auto decides by the bytes the CPU multiplies: the PLE table (only gathered: in the real Q4_K_M
    file 28.8 GB of IQ4_NL beside experts of Q4_K and Q5_0 / Q8_0) and the token embeddings beside an LM head of
    their own are left out; every other tensor counts at its file bytes."""
    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), types={r"per_layer_token_embd": "Q8_0"})
    source = GGUFSource(path)
    tensors = {t.name: t for t in source.readers[0].tensors}
    assert "output.weight" in tensors  # the LM head is its own tensor here
    counted = source.bytes_by_type()
    gathered = {"per_layer_token_embd.weight", "token_embd.weight"}
    expected: dict[int, int] = {}
    for name, tensor in tensors.items():
        if name not in gathered:
            expected[int(tensor.tensor_type)] = expected.get(int(tensor.tensor_type), 0) + int(tensor.n_bytes)
    assert counted == expected and int(Q.Q8_0) not in counted  # the table was the file's only Q8_0


@pytest.mark.parametrize("table_type", ["F16", "BF16", "Q8_0", "IQ4_NL"])
def test_ngram_table_stays_packed_over_the_files_map(table_type, wide_ple_folder, tmp_path):
    """The table loads as a PackedEmbedding whose blocks are the file's bytes (no copy); the model computes
    what the safetensors model computes with the table's dequantized values."""
    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), types={r"per_layer_token_embd": table_type})
    source = GGUFSource(path)
    assert source.lookup_tables_packed  # so the model builds the dense table on meta, never in host memory
    from_gguf = build_model(source, "cpu", "float32", quiet=True)
    table = from_gguf.get_submodule(TABLE)
    assert isinstance(table, PackedEmbedding) and table.weight.qtype == Q[table_type]
    mapped = source.readers[0].data
    start = mapped.ctypes.data
    assert start <= table.weight.blocks.data_ptr() < start + mapped.nbytes
    raw = next(t for t in source.readers[0].tensors if t.name == "per_layer_token_embd.weight")
    dense = np.asarray(gguf.quants.dequantize(raw.data, raw.tensor_type), dtype=np.float32).reshape(table.weight.shape)
    from_safetensors = build_model(HFSource(wide_ple_folder), "cpu", "float32", quiet=True)
    from_safetensors.get_submodule(TABLE).weight.data.copy_(torch.from_numpy(dense))
    ids = prompt_with_eos()
    # out_proj's tiled value heads sum in another order: float32 rounding
    assert rel_err(prompt_logits(from_gguf, ids), prompt_logits(from_safetensors, ids)) < 1e-5
    # the memory plan counts the table at its file bytes as read through the map (neither on the device nor in
    # host RAM), everything else (F32 here) dense
    others = sum(t.n_elements * 4 for t in source.readers[0].tensors if t.name != raw.name)
    sizes = source.weight_sizes(torch.float32)
    assert (sizes.total, sizes.mapped, sizes.host) == (others, raw.n_bytes, 0)


def test_the_host_asks_the_page_cache_for_a_mapped_table_s_rows_while_its_reads_are_slow(wide_ple_folder, tmp_path,
                                                                                       monkeypatch):
    """A table read by the host over the file's map (a CPU run; a CUDA run whose table is not page-locked) goes
    through page_advice.RowReads: the map is marked for random access once, and once a plain gather was slow (here
    every one is: the threshold is below zero) the next lookups' rows are advised (MADV_WILLNEED) just before they
    are read, the very rows the lookup then gathers. The logits do not change."""
    from strata import page_advice

    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), types={r"per_layer_token_embd": "IQ4_NL"})
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    blocks = model.get_submodule(TABLE).weight.blocks
    events = []
    real_random, real_ahead, real_select = page_advice.random_access, page_advice.read_ahead, torch.Tensor.index_select
    monkeypatch.setattr(page_advice, "SLOW_GATHER_BASE_NS", -10**12)
    monkeypatch.setattr(page_advice, "random_access", lambda t: events.append(("random", t.data_ptr())) or
                        real_random(t))
    monkeypatch.setattr(page_advice, "read_ahead", lambda t, ids: events.append(("advise", t.data_ptr(),
                                                                                 ids.tolist())) or real_ahead(t, ids))
    ids = prompt_with_eos()
    first = prompt_logits(model, ids)  # a plain gather, timed (slow)
    reads = []
    monkeypatch.setattr(torch.Tensor, "index_select", lambda t, dim, index: reads.append(
        (t.data_ptr(), index.tolist())) or real_select(t, dim, index))
    advised = prompt_logits(model, ids)
    monkeypatch.setattr(torch.Tensor, "index_select", real_select)
    assert events[0] == ("random", blocks.data_ptr()) and sum(e[0] == "random" for e in events) == 1
    advice = [e for e in events if e[0] == "advise"]
    assert len(advice) == 1 and advice[0][1] == blocks.data_ptr()  # the second prompt's lookup
    assert (blocks.data_ptr(), advice[0][2]) in reads  # the rows advised are the rows gathered
    assert torch.equal(advised, first)


@pytest.mark.parametrize("table_type, free_gib", [("BF16", 64), ("Q8_0", 64), ("IQ4_NL", 64), ("IQ4_NL", 4)])
def test_a_packed_table_is_copied_off_the_map_and_page_locked_as_its_blocks_buffer(table_type, free_gib,
                                                                                   wide_ple_folder, tmp_path,
                                                                                   monkeypatch):
    """On a CUDA run (by default) a table kept as the file's blocks is copied from the file's map into memory of its
    own (locking the map itself ran for minutes on an H100 host), which becomes the packed weight's blocks buffer
    (living as long as the model) and is page-locked; the layer reads it in place; its forward on ids of another
    device takes the dequantizing gather. Not where the copy would leave under loader.TABLE_LOCK_HEADROOM of RAM
    free. (No CUDA needed: the card's size, the free RAM and the locking are stand-ins.)"""
    from types import SimpleNamespace

    from strata.kernels import packed_dequant
    from strata.weights import loader

    locked = []
    monkeypatch.setattr(loader, "pin_in_place", lambda tensor, what: locked.append(tensor) or True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=2**40))
    monkeypatch.setattr(loader, "host_available_bytes", lambda: free_gib * 2**30)
    monkeypatch.delenv("STRATA_PLE_IN_PLACE", raising=False)
    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), types={r"per_layer_token_embd": table_type})
    model = build_model(GGUFSource(path), "cpu", "float32", quiet=True)
    layer = model.get_submodule(TABLE.rsplit(".", 1)[0])
    loader.place_host_tables(model, "cuda:0", quiet=True)
    table = layer.ngram_embedding.weight
    mapped = table.blocks
    loader.lock_host_tables(model, "cuda:0", quiet=True)
    if free_gib * 2**30 <= loader.TABLE_LOCK_HEADROOM:
        assert not layer.read_in_place and not locked and table.blocks is mapped
        return
    assert layer.read_in_place and len(locked) == 1
    assert locked[0] is table.blocks and torch.equal(table.blocks, mapped)  # the buffer itself, a copy
    assert table.blocks.data_ptr() != mapped.data_ptr() and table.blocks.is_contiguous()
    read = []
    monkeypatch.setattr(packed_dequant, "dequantize_rows", lambda blocks, ids, *args: read.append(ids) or "rows")
    assert layer.ngram_embedding(torch.tensor([3, 1], device="meta")) == "rows" and len(read) == 1


@pytest.mark.parametrize("rows, blocks", [(1, 1), (7, 3), (33, 1)])
def test_iq4_nl_dequantize_ref_equals_gguf_bit_for_bit(rows, blocks):
    """Every bit pattern (NaN and inf scales too), also for rows taken with a stride (gathered rows)."""
    assert is_packed_type(Q.IQ4_NL)  # matmul weights of it stay packed too (the native and Triton kernels read it)
    fmt = block_format(Q.IQ4_NL)
    k = fmt.block_size * blocks
    raw = np.random.default_rng(rows).integers(0, 256, (rows * 2, fmt.row_bytes(k)), dtype=np.uint8)
    for step in (1, 2):
        expected = np.ascontiguousarray(gguf.quants.dequantize(raw[::step], Q.IQ4_NL), dtype=np.float32)
        actual = dequantize_ref(torch.from_numpy(raw.copy())[::step], Q.IQ4_NL, k)
        assert torch.equal(actual.view(torch.int32), torch.from_numpy(expected).reshape(-1, k).view(torch.int32))


# ---- bad metadata ------------------------------------------------------------------------------------

def with_metadata(path: str, out: str, changes: dict) -> str:
    """A copy of the F32 GGUF `path` with the metadata `changes` (key -> value, same type)."""
    reader = gguf.GGUFReader(path)
    writer = gguf.GGUFWriter(out, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, changes.get(name, field.contents()), field.types[0], sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@pytest.mark.parametrize("changes, message", [
    ({"qwen4exp.hyper_connection.count": 1}, r"qwen4exp\.hyper_connection\.count must be greater than one \(got 1\)"),
    ({"qwen4exp.ple.head_offsets": [0, 503, 1012, 2060]},
     r"per_layer_token_embd\.weight has 2064 rows, too few for the PLE head ranges \(2583\)"),
    ({"qwen4exp.ple.head_vocab_sizes": [503, 509, 521, 521]}, r"qwen4exp\.ple\.head_vocab_sizes is .* not consecutive"),
    ({"qwen4exp.ple.layer_multipliers": [3, 5, 7]}, r"qwen4exp\.ple\.layer_multipliers is \[3, 5, 7\], not the "),
    ({"qwen4exp.ple.layers": [1, 3]}, r"qwen4exp\.ple\.layers lists 2 layers"),
    ({"qwen4exp.attention.compress_ratios": [0, 0, 4]},
     r"qwen4exp\.attention\.compress_ratios has 3 entries for 4 layers"),
], ids=["hc-count", "table-rows", "head-sizes", "multipliers", "two-ple-layers", "short-compress-ratios"])
def test_bad_metadata_is_named_before_weights_load(changes, message, mtp_folder, tmp_path):
    good = gguf_of(mtp_folder, str(tmp_path / "good.gguf"))
    GGUFSource(good)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'bad.gguf'}: ") + message):
        GGUFSource(with_metadata(good, str(tmp_path / "bad.gguf"), changes))


def test_zero_compress_ratios_attend_densely_as_llama_cpp_reads_them(mtp_folder, tmp_path, caplog):
    """llama.cpp's converter writes compress ratio 0 on every layer when transformers >= 5.24 loads the config (its
    layer_types then say indexed_attention, and the converter looks for full_attention), and llama.cpp attends
    densely on a layer of ratio 0. Such a file loads with a notice and attends densely, its indexers unread: the
    logits of HF's model with a QSA budget past the prompt (dense attention) over a prompt past the file's budget.
    `strata quantize` writes it again as it was (indexers and ratios 0: llama.cpp's loader requires the indexers)."""
    good = gguf_of(mtp_folder, str(tmp_path / "good.gguf"))
    dense = with_metadata(good, str(tmp_path / "dense.gguf"), {"qwen4exp.attention.compress_ratios": [0] * 5})
    with caplog.at_level("WARNING"):
        model = build_model(GGUFSource(dense), "cpu", "float32", quiet=True)
    assert "compress_ratios is 0 on every attention layer, so they attend densely" in caplog.text
    assert not model.config.qsa and not hasattr(model.model.layers[2].self_attn, "indexer")
    ids = prompt_with_eos()
    hf = transformers.AutoModelForCausalLM.from_pretrained(mtp_folder, dtype=torch.float32, indexer_budget=4096)
    sparse = transformers.AutoModelForCausalLM.from_pretrained(mtp_folder, dtype=torch.float32)
    with torch.no_grad():
        ref, ref_sparse = (m.eval()(torch.tensor([ids])).logits[0] for m in (hf, sparse))
    assert rel_err(ref_sparse, ref) > 1e-2  # the prompt is past the budget: QSA and dense attention differ
    assert rel_err(prompt_logits(model, ids), ref) < 1e-4
    from strata.weights.gguf_export import export_gguf

    requantized = str(tmp_path / "requantized.gguf")
    export_gguf(dense, requantized, scheme="f32")
    reader = gguf.GGUFReader(requantized)
    assert reader.fields["qwen4exp.attention.compress_ratios"].contents() == [0] * 5
    assert {t.name for t in reader.tensors if t.name.startswith("blk.2.indexer.")} == {
        f"blk.2.indexer.{part}.weight" for part in ("q_proj", "k_proj", "q_norm", "k_norm")}
    again = build_model(GGUFSource(requantized), "cpu", "float32", quiet=True)
    assert rel_err(prompt_logits(again, ids), ref) < 1e-4


@pytest.mark.gpu
def test_a_packed_table_read_in_place_gives_the_host_gather_s_tokens(wide_ple_folder, tmp_path, monkeypatch):
    """On the GPU, an IQ4_NL table over the file's map: by default the device reads its rows (no graph split
    for it), with STRATA_PLE_IN_PLACE=0 the host gathers them between two graph parts; greedy tokens are equal."""
    from strata import LLM, SamplingParams

    path = gguf_of(wide_ple_folder, str(tmp_path / "model.gguf"), types={r"per_layer_token_embd": "IQ4_NL"})
    prompts = [torch.randint(3, 160, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (5, 9, 17)]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (12, 20, 8)]
    runs = {}
    for in_place in (False, True):
        monkeypatch.setenv("STRATA_PLE_IN_PLACE", "1" if in_place else "0")
        llm = LLM(path, dtype="bfloat16", device="cuda", max_num_seqs=3, block_size=4)
        layer = llm.engine.runner.model.get_submodule(TABLE.rsplit(".", 1)[0])
        assert isinstance(layer.ngram_embedding, PackedEmbedding) and layer.read_in_place == in_place
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
        runs[in_place] = [o.outputs[0].token_ids for o in outs]
        del llm
        torch.cuda.empty_cache()
    assert runs[True] == runs[False]
