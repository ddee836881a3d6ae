"""Logit bias and grammar constraints in the sampler and in verification windows: the bitmask expanded on
the device equals a plain bit loop; +100 bias forces a token under greedy; a grammar-constrained sampler
only ever emits text the grammar accepts (random logits); window masks walk the drafts and leave the
matcher where it was, commit advances it by the accepted tokens, and a refused draft is rejected by
verification; request validation names the field. CPU only."""

from __future__ import annotations

import json
import re

import pytest
import torch

from strata import structured
from strata.sample import Sampler
from strata.sample.constraints import allow_all_where_empty, apply_bitmask, unpack_bitmask
from strata.spec.verify_step import _verify
from strata.types import SamplingParams, ScheduledSlot, StructuredOutputs
from tiny_tokenized import smollm2_tokenizer

V = 49152
# CPU always; CUDA too on the GPU machine (`-m gpu`): pinned bitmasks, byte views and index copies there
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.fixture(scope="module")
def hf_tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="module")
def llg_tokenizer(hf_tokenizer):
    return structured.llg_tokenizer(hf_tokenizer, V, (hf_tokenizer.eos_token_id,))


def grammar_sampler(llg_tokenizer, hf_tokenizer, max_num_seqs: int = 4, device: str = "cpu") -> Sampler:
    sampler = Sampler(max_num_seqs, V, [hf_tokenizer.eos_token_id], device, seed=0)
    sampler.constraints.new_matcher = lambda c: structured.new_matcher(c, llg_tokenizer)
    return sampler


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab_size", [1, 31, 32, 33, 100])
def test_bitmask_expansion_equals_a_bit_loop(vocab_size, device):
    words = (vocab_size + 31) // 32
    bitmask = torch.randint(-2**31, 2**31 - 1, (3, words), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    bitmask[2] = 0  # a row that allows nothing
    expected = torch.tensor([[bool((int(bitmask[r, t // 32]) >> (t % 32)) & 1) for t in range(vocab_size)]
                             for r in range(3)])
    assert torch.equal(unpack_bitmask(bitmask.to(device), vocab_size).cpu(), expected)
    logits = torch.randn(3, vocab_size)
    masked = apply_bitmask(logits.to(device), bitmask.to(device)).cpu()
    for r in range(3):
        assert torch.equal(masked[r], logits[r].masked_fill(~expected[r], float("-inf")))
    allow_all_where_empty(bitmask)  # nothing allowed: everything is, rather than NaN probabilities
    assert torch.equal(bitmask[2], torch.full((words,), -1, dtype=torch.int32))
    assert torch.equal(unpack_bitmask(bitmask, vocab_size)[:2], expected[:2])


@pytest.mark.parametrize("device", DEVICES)
def test_logit_bias_forces_and_bans_tokens_under_greedy(device):
    sampler = Sampler(3, 50, [0], device)
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)).to(device)
    top = logits.argmax(dim=1).tolist()
    sampler.add_slot(0, SamplingParams(temperature=0.0, logit_bias={7: 100.0}), [1])
    sampler.add_slot(1, SamplingParams(temperature=0.0, logit_bias={top[1]: -100.0}), [1])
    sampler.add_slot(2, SamplingParams(temperature=0.0), [1])
    out = sampler.sample(logits, [0, 1, 2]).token_ids
    assert out[0] == 7
    assert out[1] == logits[1].topk(2).indices[1].item()  # the banned argmax gives way to the runner-up
    assert out[2] == top[2]
    # sampled rows too: +100 leaves the other tokens with probability ~e^-100
    sampler.add_slot(0, SamplingParams(temperature=1.0, seed=3, logit_bias={11: 100.0}), [1])
    assert all(sampler.sample(logits[:1], [0]).token_ids == [11] for _ in range(20))


@pytest.mark.parametrize("field, value, message", [
    ("logit_bias", {5: 101.0}, "logit_bias values must be numbers in \\[-100, 100\\]"),
    ("logit_bias", {-1: 1.0}, "logit_bias keys must be token ids"),
    ("logit_bias", {"5": 1.0}, "logit_bias keys must be token ids"),
    ("structured_outputs", StructuredOutputs(), "structured_outputs needs exactly one of"),
    ("structured_outputs", StructuredOutputs(regex="a", grammar="start: \"a\""), "got regex, grammar"),
    ("structured_outputs", StructuredOutputs(choice=[]), "choice must be a non-empty list"),
])
def test_invalid_constraints_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**{field: value})


@pytest.mark.parametrize("constraint, message", [
    (StructuredOutputs(json={"type": "frobnicate"}), "Invalid type: frobnicate"),
    (StructuredOutputs(json={"allOf": [{"type": "string"}, {"type": "integer"}]}), "Unsatisfiable schema"),
    (StructuredOutputs(json="{not json"), "not valid JSON"),
    (StructuredOutputs(regex="a(b"), "unclosed group"),
    (StructuredOutputs(grammar="start: missing_rule"), "unknown name"),
])
def test_bad_grammars_are_named(llg_tokenizer, constraint, message):
    with pytest.raises(ValueError, match=message):
        structured.check(constraint, llg_tokenizer)


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "n": {"type": "integer", "minimum": -5, "maximum": 500},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "n", "tags"], "additionalProperties": False}


@pytest.mark.parametrize("constraint, accepts", [
    (StructuredOutputs(json=SCHEMA), lambda text: set(json.loads(text)) == {"name", "n", "tags"}),
    (StructuredOutputs(regex=r"[0-9]{3}-[a-z]{2}"), lambda text: re.fullmatch(r"[0-9]{3}-[a-z]{2}", text)),
    (StructuredOutputs(choice=["yes", "no", "été"]), lambda text: text in ("yes", "no", "été")),
    (StructuredOutputs(grammar='root ::= "(" [a-c]+ ")"'), lambda text: re.fullmatch(r"\([a-c]+\)", text)),
])
@pytest.mark.parametrize("device", DEVICES)
def test_random_logits_under_a_grammar_give_valid_text(llg_tokenizer, hf_tokenizer, constraint, accepts, device):
    sampler = grammar_sampler(llg_tokenizer, hf_tokenizer, device=device)
    eos = hf_tokenizer.eos_token_id
    for seed in range(3):
        sampler.add_slot(1, SamplingParams(temperature=1.0, seed=seed, structured_outputs=constraint), [1])
        generator = torch.Generator().manual_seed(seed)
        out = []
        while not out or out[-1] != eos:
            token = sampler.sample((torch.randn(1, V, generator=generator) * 3).to(device), [1]).token_ids[0]
            sampler.append_output(1, [token])
            out.append(token)
            assert len(out) < 200
        assert accepts(hf_tokenizer.decode(out[:-1])), hf_tokenizer.decode(out[:-1])


def test_window_masks_walk_the_drafts_and_commit_advances(llg_tokenizer, hf_tokenizer):
    sampler = grammar_sampler(llg_tokenizer, hf_tokenizer)
    sampler.add_slot(0, SamplingParams(temperature=0.0, structured_outputs=StructuredOutputs(regex="a[bc][cd]e")), [1])
    a, b, c, x = (ids(hf_tokenizer, t)[0] for t in "abcx")
    matcher = sampler.constraints.matchers[0]
    # rows 2..5: position 0, after a, after a b, after a b x (refused: row left unmasked)
    logits = sampler.constrain_windows(torch.zeros(7, V), [(0, 2, [a, b, x])])
    finite = [set(torch.isfinite(logits[r]).nonzero().flatten().tolist()) for r in range(7)]
    assert a in finite[2] and b not in finite[2]
    assert b in finite[3] and a not in finite[3]
    assert c in finite[4] and x not in finite[4]
    assert len(finite[5]) == V and len(finite[0]) == V and len(finite[6]) == V
    assert matcher.validate_tokens([a, b, c]) == 3  # rolled back to the start
    # masks prepared ahead (while the forward would run) are the ones apply computes; stale ones are not used
    sampler.prepare_constraints([(0, 0, [a, b, x])])
    assert torch.equal(sampler.constrain_windows(torch.zeros(7, V), [(0, 2, [a, b, x])]), logits)
    assert not sampler.constraints._prepared  # taken
    sampler.prepare_constraints([(0, 0, [a])])
    assert torch.equal(sampler.constrain_windows(torch.zeros(7, V), [(0, 2, [a, b, x])]), logits)
    sampler.prepare_constraints([(0, 0, [])])
    sampler.append_output(0, [a, b])                # accepted a, then b as the bonus
    assert matcher.validate_tokens([c]) == 1 and matcher.validate_tokens([a]) == 0
    assert not sampler.constraints._prepared  # the matcher moved: what was prepared before is gone


@pytest.mark.parametrize("device", DEVICES)
def test_verification_rejects_a_draft_the_grammar_refuses(llg_tokenizer, hf_tokenizer, device):
    """The target (unconstrained) would accept every draft; the grammar refuses the second, so one is
    accepted and the token at the refusal is the grammar's choice. Greedy and sampled windows alike."""
    sampler = grammar_sampler(llg_tokenizer, hf_tokenizer, device=device)
    a, c, x = (ids(hf_tokenizer, t)[0] for t in "acx")
    for slot_id, temperature in ((0, 0.0), (1, 0.7)):
        sampler.add_slot(slot_id, SamplingParams(temperature=temperature, seed=1,
                                                 structured_outputs=StructuredOutputs(regex="a[bc]d")), [1])
    logits = torch.zeros(6, V)
    for start in (0, 3):
        logits[start, a] = logits[start + 1, x] = logits[start + 2, c] = 50.0
        logits[start + 1, c] = 10.0
    windows = [(ScheduledSlot(s, 0, 3, [], [1, a, x], draft_token_ids=[a, x]), 0) for s in (0, 1)]
    for tokens, num_accepted in _verify(sampler, logits.to(device), windows, [0, 3], None):
        assert (tokens, num_accepted) == ([a, c], 1)


@pytest.mark.parametrize("constraint, answer", [
    (StructuredOutputs(json=SCHEMA), '{"name":"x/y","n":3,"tags":["a"]}'),
    (StructuredOutputs(json_object=True), '{"k":[1,2]}'),
    (StructuredOutputs(regex=r"[0-9]+/[a-z]"), "12/b"),
    (StructuredOutputs(choice=["yes", "no"]), "no"),
])
def test_a_constraint_after_reasoning_keeps_the_reasoning_first(llg_tokenizer, hf_tokenizer, constraint, answer):
    """For a template that opened <think>: reasoning, </think>, then the answer the constraint allows."""
    wrapped = structured.after_reasoning(constraint)
    structured.check(wrapped, llg_tokenizer)
    matcher = structured.new_matcher(wrapped, llg_tokenizer)
    good = ids(hf_tokenizer, "Let me think.\n</think>\n\n" + answer)
    assert matcher.try_consume_tokens(good) == len(good) and matcher.is_accepting()
    matcher.reset()
    bad = ids(hf_tokenizer, "Let me think.\n</think>\n\nnot it")
    assert matcher.try_consume_tokens(bad) < len(bad)
    assert structured.after_reasoning(StructuredOutputs(grammar='start: "a"')).grammar == 'start: "a"'
