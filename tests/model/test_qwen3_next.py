"""Qwen3-Next against HF transformers on a tiny random model (float32, CPU): prompt logits in one chunk
and in pieces, ragged batches, greedy decoding, the two delta-rule forms, and the MTP head (checked
against HF's own decoder layer). Contexts and cache pools are built by hand: no runner involved."""

from __future__ import annotations

import json
import shutil
from itertools import accumulate

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3NextConfig
from transformers import Qwen3NextForCausalLM as HFQwen3Next
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextDecoderLayer, Qwen3NextRotaryEmbedding

from strata.model.context import ForwardContext, ForwardScratch
from strata.model.gated_delta_net import chunked_gated_delta_rule, l2norm, recurrent_gated_delta_rule
from strata.weights.hf_source import HFSource
from strata.weights.loader import build_model

BLOCK_SIZE = 8
BLOCKS_PER_SLOT = 16   # 128 tokens per slot; slot s owns blocks [s * 16, (s + 1) * 16)
MAX_SLOTS = 6
INIT_SCALE = 0.15

HF_CONFIG = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    mlp_only_layers=[2],  # one dense MLP too
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
    initializer_range=INIT_SCALE,
)


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max()).item()


def perturb_vectors(module: torch.nn.Module, generator: torch.Generator) -> None:
    """HF initialises norms to 0 / 1 and dt_bias to 1; perturb every 1-D parameter so a wrong norm
    flavour or a swapped vector cannot pass."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=generator))


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    torch.manual_seed(0)
    hf = HFQwen3Next(Qwen3NextConfig(**HF_CONFIG)).eval()
    perturb_vectors(hf, torch.Generator().manual_seed(1))
    folder = tmp_path_factory.mktemp("qwen3_next")
    hf.save_pretrained(folder)
    return hf, folder


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    return hf_folder[0]


@pytest.fixture(scope="module")
def model(hf_folder):
    return build_model(HFSource(str(hf_folder[1])), "cpu", "float32", quiet=True)


# ---- hand-built pools and contexts ----------------------------------------------------------------

def make_caches(model):
    cfg = model.config
    kv_layers = cfg.full_attention_layers + ([cfg.num_hidden_layers] if model.has_mtp else [])
    kv_shape = (MAX_SLOTS * BLOCKS_PER_SLOT, BLOCK_SIZE, cfg.num_key_value_heads, cfg.head_dim)
    kv = {i: (torch.zeros(kv_shape), torch.zeros(kv_shape)) for i in kv_layers}
    states = {i: (torch.zeros(MAX_SLOTS, *conv), torch.zeros(MAX_SLOTS, *ssm, dtype=torch.float32))
              for i, (conv, ssm) in model.recurrent_state_shapes().items()}
    return kv, states


def make_ctx(caches, batch: list[tuple[int, int, int]]) -> ForwardContext:
    """batch: (slot, num_computed, query_len) per sequence, in plan order."""
    kv, states = caches
    tables = torch.stack([torch.arange(s * BLOCKS_PER_SLOT, (s + 1) * BLOCKS_PER_SLOT) for s, _, _ in batch])
    positions = [torch.arange(c, c + n) for _, c, n in batch]
    slot_mapping = [tables[i][p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for i, p in enumerate(positions)]
    query_lens = [n for _, _, n in batch]
    return ForwardContext(
        positions=torch.cat(positions), slot_mapping=torch.cat(slot_mapping),
        query_start_loc=torch.tensor([0, *accumulate(query_lens)]),
        seq_lens=torch.tensor([c + n for _, c, n in batch]), block_tables=tables,
        state_slot_ids=torch.tensor([s for s, _, _ in batch]),
        has_initial_state=torch.tensor([c > 0 for _, c, _ in batch]),
        query_lens=tuple(query_lens), num_computed=tuple(c for _, c, _ in batch),
        kv_caches=kv, state_caches=states, scratch=ForwardScratch(), block_size=BLOCK_SIZE)


def step(model, caches, batch: list[tuple[int, int, int]], token_ids: list[list[int]]) -> torch.Tensor:
    """One forward over a ragged batch -> logits [T, V]."""
    ids = torch.tensor([t for seq in token_ids for t in seq])
    return model.compute_logits(model(ids, make_ctx(caches, batch)))


def prefill(model, caches, slot: int, ids: list[int], chunk: int) -> torch.Tensor:
    logits = [step(model, caches, [(slot, start, len(ids[start:start + chunk]))], [ids[start:start + chunk]])
              for start in range(0, len(ids), chunk)]
    return torch.cat(logits)


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, HF_CONFIG["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ---- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [72, 7, 24])  # one chunked window; recurrent pieces; chunked pieces
@pytest.mark.parametrize("torch_gdn", [False, True])
def test_prompt_logits_match_hf(model, hf_model, chunk, torch_gdn, monkeypatch):
    """On the CPU's native recurrence (every window token by token) and on the torch path
    (STRATA_TORCH_CPU_GDN=1: the padded recurrent batch and the chunked form, which CUDA's eager fallback takes)."""
    if torch_gdn:
        monkeypatch.setenv("STRATA_TORCH_CPU_GDN", "1")
    ids = random_ids(72, seed=2)
    with torch.no_grad():
        expected = hf_model(torch.tensor([ids])).logits[0]
    logits = prefill(model, make_caches(model), slot=2, ids=ids, chunk=chunk)
    assert rel_err(logits, expected) < 1e-4


def test_ragged_batch_matches_each_alone(model):
    slots, prompts = [3, 0, 5], [random_ids(n, seed=10 + n) for n in (37, 9, 21)]
    more = [random_ids(n, seed=20 + n) for n in (1, 20, 3)]  # decode row, long chunk, short window
    caches = make_caches(model)
    first = step(model, caches, [(s, 0, len(p)) for s, p in zip(slots, prompts)], prompts)
    second = step(model, caches, [(s, len(p), len(m)) for s, p, m in zip(slots, prompts, more)], more)
    for i, (prompt, cont) in enumerate(zip(prompts, more)):
        alone_caches = make_caches(model)
        alone = torch.cat([step(model, alone_caches, [(1, 0, len(prompt))], [prompt]),
                           step(model, alone_caches, [(1, len(prompt), len(cont))], [cont])])
        batched = torch.cat([first.split([len(p) for p in prompts])[i], second.split([len(m) for m in more])[i]])
        assert rel_err(batched, alone) < 1e-4
    conv_state, ssm_state = caches[1][0]
    idle = [1, 2, 4]
    assert not conv_state[idle].any() and not ssm_state[idle].any()  # rows of idle slots stay untouched


def test_long_windows_batch_by_similar_length():
    """Prompt chunks run through the chunked rule together when their chunk counts are within 2x of
    the batch's shortest (the ragged-batch test above checks the batched numbers)."""
    from strata.model.gated_delta_net import _CHUNK_SIZE, _similar_lengths

    assert _CHUNK_SIZE == 64
    lens = [37, 200, 21, 64, 65, 129, 300, 900]
    # chunks: 1, 4, 1, 1, 2, 3, 5, 15
    assert _similar_lengths([0, 1, 2, 3, 4, 5, 6, 7], lens) == [[2, 0, 3, 4], [5, 1, 6], [7]]
    assert _similar_lengths([1], lens) == [[1]] and _similar_lengths([], lens) == []


@pytest.mark.parametrize("torch_gdn", [True, False])
def test_a_steps_index_layouts_are_made_once_for_all_layers(model, monkeypatch, torch_gdn):
    """The eager path's per-step index tensors (copied to the device) are built once per step and
    shared by the layers: a copy per layer would make the host wait for the device at every layer. On the
    CPU every window takes the native recurrence (no padded layout) unless STRATA_TORCH_CPU_GDN=1."""
    import strata.model.gated_delta_net as gdn

    if torch_gdn:
        monkeypatch.setenv("STRATA_TORCH_CPU_GDN", "1")
    calls = []
    layout = gdn._padded_layout
    monkeypatch.setattr(gdn, "_padded_layout", lambda *args: (calls.append(args[0]), layout(*args))[1])
    num_gdn_layers = sum(isinstance(m, gdn.GatedDeltaNet) for m in model.modules())
    assert num_gdn_layers >= 2
    prompts = [random_ids(n, seed=40 + n) for n in (37, 3)]   # a long chunk and a short window: two groups
    step(model, make_caches(model), [(0, 0, 37), (1, 0, 3)], prompts)
    from strata.model import cpu_ops

    assert sorted(calls) == ([[0], [1]] if cpu_ops.native_gdn() is None else [])


def random_delta_inputs(batch: int, length: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    heads, dk, dv = 4, 16, 8
    q = l2norm(torch.randn(batch, length, heads, dk, generator=gen))
    k = l2norm(torch.randn(batch, length, heads, dk, generator=gen))
    v = torch.randn(batch, length, heads, dv, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=gen))
    beta = torch.rand(batch, length, heads, generator=gen)
    state = torch.randn(batch, heads, dk, dv, generator=gen)
    return q, k, v, g, beta, state


@pytest.mark.parametrize("chunk_size", [8, 64])
def test_chunked_delta_rule_matches_recurrent(chunk_size):
    inputs = random_delta_inputs(batch=2, length=37, seed=3)
    out_r, state_r = recurrent_gated_delta_rule(*inputs)
    out_c, state_c = chunked_gated_delta_rule(*inputs, chunk_size=chunk_size)
    assert rel_err(out_c, out_r) < 1e-5
    assert rel_err(state_c, state_r) < 1e-5


def test_recurrent_delta_rule_returns_state_after_every_position():
    q, k, v, g, beta, state = random_delta_inputs(batch=2, length=9, seed=4)
    out, all_states = recurrent_gated_delta_rule(q, k, v, g, beta, state, return_all_states=True)
    assert all_states.shape == (2, 9, 4, 16, 8)
    for t in (0, 4, 8):
        prefix_out, prefix_state = recurrent_gated_delta_rule(q[:, :t + 1], k[:, :t + 1], v[:, :t + 1],
                                                              g[:, :t + 1], beta[:, :t + 1], state)
        torch.testing.assert_close(all_states[:, t], prefix_state)
        torch.testing.assert_close(out[:, :t + 1], prefix_out)


def test_greedy_decode_matches_hf_generate(model, hf_model):
    prompt, new_tokens = random_ids(10, seed=5), 32
    with torch.no_grad():
        hf_out = hf_model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new_tokens,
                                   output_logits=True, return_dict_in_generate=True)
    for step_logits in hf_out.logits:  # peaked logits: no near-ties for argmax to flip on
        top2 = step_logits[0].topk(2).values
        assert top2[0] - top2[1] > 1e-3
    caches = make_caches(model)
    tokens = [int(prefill(model, caches, slot=4, ids=prompt, chunk=len(prompt))[-1].argmax())]
    while len(tokens) < new_tokens:
        logits = step(model, caches, [(4, len(prompt) + len(tokens) - 1, 1)], [tokens[-1:]])
        tokens.append(int(logits[-1].argmax()))
    assert tokens == hf_out.sequences[0, len(prompt):].tolist()


# ---- MTP ------------------------------------------------------------------------------------------

def mtp_layer_config() -> Qwen3NextConfig:
    cfg = Qwen3NextConfig(**{**HF_CONFIG, "num_hidden_layers": 1, "layer_types": ["full_attention"],
                             "mlp_only_layers": []})
    cfg._attn_implementation = "eager"
    return cfg


def random_mtp_tensors(hidden: int) -> tuple[dict[str, torch.Tensor], Qwen3NextDecoderLayer]:
    """Random `mtp.*` tensors in the checkpoint's naming (per-expert), and the HF layer holding the
    same decoder-layer weights."""
    gen = torch.Generator().manual_seed(6)
    layer = Qwen3NextDecoderLayer(mtp_layer_config(), layer_idx=0).eval()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(0.1 * torch.randn(p.shape, generator=gen) if p.dim() == 1
                    else INIT_SCALE * torch.randn(p.shape, generator=gen))
    tensors = {}
    for name, t in layer.state_dict().items():
        if name == "mlp.experts.gate_up_proj":  # [E, 2I, D] -> per-expert gate_proj / up_proj
            for e, (gate, up) in enumerate(zip(*t.chunk(2, dim=1))):
                tensors[f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight"] = gate.contiguous()
                tensors[f"mtp.layers.0.mlp.experts.{e}.up_proj.weight"] = up.contiguous()
        elif name == "mlp.experts.down_proj":
            for e, down in enumerate(t):
                tensors[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] = down.contiguous()
        else:
            tensors[f"mtp.layers.0.{name}"] = t.contiguous()
    tensors["mtp.fc.weight"] = INIT_SCALE * torch.randn(hidden, 2 * hidden, generator=gen)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{norm}.weight"] = 0.1 * torch.randn(hidden, generator=gen)
    return tensors, layer


def zero_centered_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)


def reference_mtp(tensors, layer, embed: torch.Tensor, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    x = torch.cat([zero_centered_norm(embed[ids], tensors["mtp.pre_fc_norm_embedding.weight"]),
                   zero_centered_norm(hidden, tensors["mtp.pre_fc_norm_hidden.weight"])], dim=-1)
    x = (x @ tensors["mtp.fc.weight"].T)[None]                                    # [1, T, D]
    positions = torch.arange(x.shape[1])[None]
    causal = torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1)[None, None]
    x = layer(x, position_embeddings=Qwen3NextRotaryEmbedding(mtp_layer_config())(x, positions),
              attention_mask=causal, position_ids=positions)
    return zero_centered_norm(x[0], tensors["mtp.norm.weight"])


def test_mtp_head_matches_hf_decoder_layer(model, hf_folder, tmp_path):
    hf, folder = hf_folder
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    tensors, layer = random_mtp_tensors(HF_CONFIG["hidden_size"])
    save_file({**load_file(tmp_path / "model.safetensors"), **tensors}, tmp_path / "model.safetensors")
    with_mtp = build_model(HFSource(str(tmp_path)), "cpu", "float32", quiet=True)
    assert with_mtp.has_mtp and not model.has_mtp

    ids, num_tokens = torch.tensor(random_ids(13, seed=7)), 13
    hidden = torch.randn(num_tokens, HF_CONFIG["hidden_size"], generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        expected = reference_mtp(tensors, layer, hf.model.embed_tokens.weight, ids, hidden)
    caches = make_caches(with_mtp)  # the MTP layer's KV cache carries over from the first piece to the second
    out = torch.cat([with_mtp.mtp_forward(ids[:9], hidden[:9], make_ctx(caches, [(1, 0, 9)])),
                     with_mtp.mtp_forward(ids[9:], hidden[9:], make_ctx(caches, [(1, 9, 4)]))])
    assert rel_err(out, expected) < 1e-4
    assert rel_err(with_mtp.compute_logits(out), expected @ hf.lm_head.weight.T) < 1e-4


def test_windows_ahead_of_a_prompt_chunk_keep_only_their_states(model):
    """A verification step (keep_window_states) of a 4-token window ahead of a 37-token prompt chunk: each Gated
    DeltaNet layer keeps the per-token states of the window's rows only (a chunk's would take [T, Hv, Dk, Dv]), those
    of the same window stepped alone, and its logits (the float projections' sums depend on the batch: close, not
    equal bits)."""
    import dataclasses

    from strata.model import cpu_ops
    from strata.model.gated_delta_net import GatedDeltaNet

    if cpu_ops.native_gdn() is None:
        pytest.skip("no native CPU recurrence here")
    first, window, chunk = random_ids(5, seed=61), random_ids(4, seed=62), random_ids(37, seed=63)
    results = []
    for batch, ids in (([(0, 5, 4), (1, 0, 37)], [window, chunk]), ([(0, 5, 4)], [window])):
        caches = make_caches(model)
        step(model, caches, [(0, 0, 5)], [first])
        ctx = dataclasses.replace(make_ctx(caches, batch), keep_window_states=True)
        with torch.no_grad():
            logits = model.compute_logits(model(torch.tensor([t for seq in ids for t in seq]), ctx))
        results.append((logits[:4], ctx.scratch.window_states))
    (mixed_logits, mixed_states), (alone_logits, alone_states) = results
    layers = [m.layer_idx for m in model.modules() if isinstance(m, GatedDeltaNet)]
    for layer in layers:
        assert mixed_states[layer][1].shape[0] == 4
        torch.testing.assert_close(mixed_states[layer][1], alone_states[layer][1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mixed_logits, alone_logits, rtol=1e-5, atol=1e-5)
