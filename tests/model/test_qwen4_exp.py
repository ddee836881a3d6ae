"""Qwen4-Exp against HF transformers on a tiny random model (float32, CPU), beyond the shared parity tests:
PLE's n-gram context cut at EOS tokens (whole prompt and chunks that split it), QSA past its budget
really choosing (a dense model differs), and config mistakes named before any weight loads."""

from __future__ import annotations

import json

import pytest
import torch

from strata.config import ModelConfig
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model
from tiny_models import build_hf_model, prompt_logits

EOS = 2


@pytest.fixture(scope="module")
def hf_and_folder(tmp_path_factory):
    hf = build_hf_model("qwen4_exp")
    folder = tmp_path_factory.mktemp("qwen4_exp")
    hf.save_pretrained(folder)
    return hf, folder


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


def test_eos_tokens_cut_the_ngram_context(hf_and_folder):
    hf, folder = hf_and_folder
    model = build_model(HFSource(str(folder)), "cpu", "float32", quiet=True)
    ids = torch.randint(3, 160, (36,), generator=torch.Generator().manual_seed(4)).tolist()
    ids[5] = ids[6] = ids[20] = EOS  # two documents back to back, then a third
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    for chunk in (None, 5, 1):
        assert rel_err(prompt_logits(model, ids, chunk=chunk), ref) < 1e-4


def test_qsa_past_its_budget_attends_to_chosen_blocks_only(hf_and_folder, tmp_path):
    hf, folder = hf_and_folder
    ids = torch.randint(3, 160, (48,), generator=torch.Generator().manual_seed(5)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    model = build_model(HFSource(str(folder)), "cpu", "float32", quiet=True)
    attention = model.model.layers[2].self_attn
    assert attention.indexer.is_sparse(len(ids)) and not attention.indexer.is_sparse(8)
    assert rel_err(prompt_logits(model, ids), ref) < 1e-4
    # the same weights with a budget covering the whole prompt attend densely and differ from HF
    config = json.loads((folder / "config.json").read_text())
    config["indexer_budget"] = 64
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((folder / name).read_bytes()) if name != "config.json" else None
    (tmp_path / "config.json").write_text(json.dumps(config))
    dense = build_model(HFSource(str(tmp_path)), "cpu", "float32", quiet=True)
    assert rel_err(prompt_logits(dense, ids), ref) > 1e-3


@pytest.mark.parametrize("change, field", [
    (dict(hc_count=1), "hc_count"),
    (dict(indexer_budget=10), "indexer_budget"),
    (dict(indexer_kv_heads=2), "indexer_kv_heads"),
    (dict(ple_layer_ids=[3]), "ple_layer_ids"),  # layer 3 (1-based) is the attention layer
    (dict(ple_embed_dim=30), "ple_embed_dim"),
    (dict(output_gate_type="tanh"), "output_gate_type"),
])
def test_config_mistakes_are_named_before_weights_load(hf_and_folder, change, field):
    hf, _ = hf_and_folder
    config = {**hf.config.to_dict(), "architectures": ["Qwen4ExpForCausalLM"], **change}
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_hf(config)


def test_graph_variant_of_steps_past_the_qsa_budget(hf_and_folder):
    """Steps within the budget replay the plain graph; windows past it the sparse variant (blocks chosen on the
    device); a long prompt chunk past it runs eagerly."""
    from strata.model.qsa import SPARSE_VARIANT
    from strata.types import ScheduledSlot

    model = build_model(HFSource(str(hf_and_folder[1])), "cpu", "float32", quiet=True)
    dense, sparse = ScheduledSlot(0, 6, 5, [], [3] * 5), ScheduledSlot(1, 30, 1, [], [3])  # 11 and 31 tokens seen
    long_chunk = ScheduledSlot(2, 0, 40, [], [3] * 40)
    assert model.graph_variant([dense]) == "" and model.graph_variant([dense, sparse]) == SPARSE_VARIANT
    assert model.graph_variant([long_chunk]) is None


def test_history_of_a_prompt_padded_in_place_ends_at_its_real_tokens():
    """with_history (PLE's n-gram context and conv, the Gated DeltaNet conv): a CUDA graph pads a fresh
    prompt in place, and the remembered rows must be the last real ones, as without padding."""
    from strata.model.context import ForwardContext, ForwardScratch
    from strata.model.gated_delta_net import with_history

    x = torch.arange(10.0)[:, None]                       # two prompts of 5 rows: 3 and 4 of them real
    history = torch.full((2, 2, 1), -1.0)
    ctx = ForwardContext(
        positions=torch.zeros(10, dtype=torch.long), slot_mapping=torch.zeros(10, dtype=torch.long),
        query_start_loc=torch.tensor([0, 5, 10]), seq_lens=torch.tensor([5, 5]),
        block_tables=torch.zeros(2, 1, dtype=torch.long), state_slot_ids=torch.tensor([0, 1]),
        has_initial_state=torch.tensor([False, False]), query_lens=(5, 5), num_computed=(0, 0), kv_caches={},
        state_caches={}, scratch=ForwardScratch(), real_query_lens=torch.tensor([3, 4]))
    ext, token_pos, last_pos = with_history(x, history, ctx)
    assert torch.equal(ext[token_pos][:, 0], x[:, 0])
    assert ext[last_pos][..., 0].tolist() == [[1.0, 2.0], [7.0, 8.0]]


def test_a_table_that_loads_packed_is_never_allocated_dense(hf_and_folder):
    from strata.model.ple import NGramEmbedding, tables_packed

    cfg = ModelConfig.from_hf({**hf_and_folder[0].config.to_dict(), "architectures": ["Qwen4ExpForCausalLM"]})
    assert not NGramEmbedding(cfg, 0).ngram_embedding.weight.is_meta
    with tables_packed(True):
        assert NGramEmbedding(cfg, 0).ngram_embedding.weight.is_meta


@pytest.mark.parametrize("switch", [None, "1", "0"])
def test_a_host_table_is_page_locked_through_its_own_parameter_unless_turned_off(hf_and_folder, monkeypatch, switch):
    """By default a PLE table left in host memory on a CUDA run is page-locked where it lies, through its
    nn.Parameter (which lives as long as the model: pin_in_place unlocks the memory when the tensor object it got
    is collected, which for a `.data` view would be at once), and the layer then reads its rows in place. With
    STRATA_PLE_IN_PLACE=0 nothing is locked (the host gathers the rows). (No CUDA needed: the card's size and the
    locking are stand-ins.)"""
    from types import SimpleNamespace

    from strata.weights import loader

    locked = []
    monkeypatch.setattr(loader, "pin_in_place", lambda tensor, what: locked.append(tensor) or True)
    monkeypatch.setattr(loader, "HOST_TABLE_GPU_SHARE", 0.0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=2**30))
    if switch is None:
        monkeypatch.delenv("STRATA_PLE_IN_PLACE", raising=False)
    else:
        monkeypatch.setenv("STRATA_PLE_IN_PLACE", switch)
    in_place = switch != "0"
    model = build_model(HFSource(str(hf_and_folder[1])), "cpu", "bfloat16", quiet=True)
    tables = [m for m in model.modules() if type(m).__name__ == "NGramEmbedding"]
    assert tables and not any(m.read_in_place for m in tables)
    loader.place_host_tables(model, "cuda:0", quiet=True)
    loader.lock_host_tables(model, "cuda:0", quiet=True)
    assert all(m.ngram_embedding.weight.device.type == "cpu" for m in tables)  # none moved to the card
    assert [id(t) for t in locked] == ([id(m.ngram_embedding.weight) for m in tables] if in_place else [])
    assert all(m.read_in_place == in_place for m in tables)


@pytest.mark.parametrize("dtype, host", [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True)])
def test_blocks_chosen_for_the_device_are_the_reference_choice(hf_and_folder, dtype, host):
    """QSAIndexer.choose_blocks (the choice CUDA steps make on the device, here through its scoring kernel's
    torch form) makes rows read what visible() (HF's math) makes them read: decode rows and verification
    windows below, across and past the budget, through a shuffled block table; `host`: with each sequence's
    first blocks of keys only in a host tier (KV beyond VRAM; NaN left on the device)."""
    from strata.kernels.paged_attention import block_choice_visible
    from strata.model.qsa import index_cache_key
    from strata.runner.inputs import build_inputs
    from strata.types import ScheduledSlot

    model = build_model(HFSource(str(hf_and_folder[1])), "cpu", "float32", quiet=True).to(dtype)
    attention = model.model.layers[2].self_attn
    indexer, block_size = attention.indexer, 4
    windows = [(40, 1), (5, 4), (10, 3), (70, 4), (3, 1)]                 # (num_computed, new tokens)
    generator = torch.Generator().manual_seed(12)
    per_seq = [-(-(c + n) // block_size) for c, n in windows]
    ids = torch.randperm(sum(per_seq) + 2, generator=generator).tolist()
    tables = {i: ids[sum(per_seq[:i]):sum(per_seq[:i + 1])] for i in range(len(windows))}
    keys = torch.randn(len(ids), block_size, 1, indexer.head_dim, generator=generator).to(dtype)
    kv_caches = {index_cache_key(2): (keys, keys.new_empty(len(ids), block_size, 1, 0))}
    scheduled = [ScheduledSlot(slot_id=i, num_computed_tokens=c, num_new_tokens=n, new_block_ids=[], token_ids=[0] * n)
                 for i, (c, n) in enumerate(windows)]
    host_tables, host_kv_caches, host_keys = None, None, {}
    if host:  # the first full blocks of each sequence (up to 3) move to the host tier
        host_cache = torch.zeros(len(ids), block_size, 1, indexer.head_dim, dtype=dtype)
        host_tables = {i: list(range(i * 3, i * 3 + min(3, (c + n) // block_size))) for i, (c, n) in enumerate(windows)}
        for i, columns in host_tables.items():
            for column, host_block in enumerate(columns):
                host_cache[host_block] = keys[tables[i][column]]
                keys[tables[i][column]] = float("nan")
                tables[i][column] = -1
            host_keys[i] = (host_cache, None, torch.tensor(columns, dtype=torch.long))
        host_kv_caches = {index_cache_key(2): (host_cache, host_cache.new_empty(len(ids), block_size, 1, 0))}
    ctx = build_inputs(scheduled, tables, block_size, kv_caches, {}, "cpu", host_tables=host_tables,
                       host_kv_caches=host_kv_caches).ctx
    queries = torch.randn(ctx.positions.shape[0], indexer.num_heads, indexer.head_dim, generator=generator).to(dtype)
    choice = indexer.choose_blocks(queries, ctx, attention.rotary)
    start, sparse_rows = 0, 0
    for i, (done, n) in enumerate(windows):
        length = done + n
        table = ctx.block_tables[i, : -(-length // block_size)]
        expected = indexer.visible(queries[start:start + n], done, length, keys, table, attention.rotary,
                                   host_keys.get(i))                                                  # [n, L]
        q_pos = torch.arange(done, length)
        ours = block_choice_visible(q_pos, length, choice, choice[0][start:start + n])
        assert torch.equal(ours, expected), f"sequence {i}"
        sparse_rows += int(sum(indexer.is_sparse(p + 1) for p in q_pos.tolist()))
        start += n
    assert sparse_rows >= 6  # the choice was really exercised


def test_one_topk_over_all_rows_chooses_what_one_per_count_does():
    """visible()'s CUDA form (one top-k over rows padded with -inf, for long prompt chunks) = its per-count form
    (the CPU's, HF's slices) wherever scores have no ties: rows within the budget keep every seen block."""
    from strata.model.qsa import choose_in_one_topk

    generator = torch.Generator().manual_seed(3)
    top_blocks, num_blocks = 3, 20
    complete = torch.tensor([1, 3, 4, 9, 20, 7, 4])                                  # blocks each row has seen
    scores = torch.rand(len(complete), num_blocks, generator=generator)
    seen = torch.arange(num_blocks)[None] < complete[:, None]
    expected = seen & (complete <= top_blocks)[:, None]
    for row, count in enumerate(complete.tolist()):
        if count > top_blocks:
            expected[row, scores[row, :count].topk(top_blocks).indices] = True
    chosen = choose_in_one_topk(scores, seen, complete, top_blocks)
    assert torch.equal(chosen, expected)
    assert chosen[complete > top_blocks].sum(1).eq(top_blocks).all()


def test_the_indexer_and_shared_gate_rows_do_not_depend_on_the_step(hf_and_folder):
    """The QSA indexer's projection (its scores pick blocks by top-k) and the shared expert's gate run row-invariant
    on the CPU (Linear.row_invariant): a token's values are the same bits alone and beside 11 others, so a
    verification window's token picks the blocks plain decoding picks."""
    model = build_model(HFSource(str(hf_and_folder[1])), "cpu", "float32", quiet=True)
    indexer = model.model.layers[2].self_attn.indexer.index_qk_proj
    gate = next(layer.mlp.shared_expert_gate for layer in model.model.layers
                if getattr(layer.mlp, "shared_expert_gate", None) is not None)
    hidden = torch.randn(12, model.config.hidden_size, generator=torch.Generator().manual_seed(8))
    for module in (indexer, gate):
        assert module.row_invariant
        with torch.no_grad():
            batched = module(hidden)
            assert all(torch.equal(batched[i], module(hidden[i:i + 1])[0]) for i in range(12))
