"""Fast-DetectGPT's sampling discrepancy (filters/lm_detect.py): the formula, and the real transformers
loading and scoring code on a tiny randomly initialised GPT-2 saved to disk (no weights can be
downloaded here), alone and inside the synthetic stage."""

import json
import math
from pathlib import Path

import pytest
import torch

from filters.lm_detect import SamplingDiscrepancy, sampling_discrepancy


def literal_discrepancy(logits, reference_logits, labels):
    """Bao et al.'s analytic criterion for one unpadded row, written out position by position."""
    ll = mean = var = 0.0
    for t in range(labels.numel()):
        log_p = torch.log_softmax(logits[t].double(), -1)
        q = torch.softmax(reference_logits[t].double(), -1)
        ll += float(log_p[labels[t]])
        m = float((q * log_p).sum())
        mean += m
        var += float((q * log_p**2).sum()) - m * m
    return (ll - mean) / math.sqrt(var)


def test_formula_matches_the_literal_criterion_and_ignores_padding():
    generator = torch.Generator().manual_seed(0)
    logits, reference = torch.randn(2, 12, 50, generator=generator), torch.randn(2, 12, 50, generator=generator)
    labels = torch.randint(50, (2, 12), generator=generator)
    mask = torch.ones(2, 12)
    mask[1, 7:] = 0  # row 1 has 7 real positions
    d, tokens = sampling_discrepancy(logits, reference, labels, mask)
    assert tokens.tolist() == [12, 7]
    assert d[0].item() == pytest.approx(literal_discrepancy(logits[0], reference[0], labels[0]), rel=1e-5)
    assert d[1].item() == pytest.approx(literal_discrepancy(logits[1, :7], reference[1, :7], labels[1, :7]), rel=1e-5)


def test_sampled_text_scores_near_zero_and_mode_text_high():
    # Tokens drawn from q = p make d a standardised sum: ~N(0, 1). Each position's argmax makes it large.
    generator = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(1, 4000, 30, generator=generator)
    sampled = torch.multinomial(torch.softmax(logits[0], -1), 1, generator=generator).T
    mode = logits.argmax(-1)
    mask = torch.ones(1, 4000)
    d_sampled = sampling_discrepancy(logits, logits, sampled, mask)[0].item()
    d_mode = sampling_discrepancy(logits, logits, mode, mask)[0].item()
    assert abs(d_sampled) < 4
    assert d_mode > 30


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A 2-layer GPT-2 over printable-ASCII byte-level tokens (no merges) with random weights, saved to
    disk. ASCII only, so that its own output decodes and re-encodes to the same tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    # GPT-2's byte-to-unicode map: printable bytes stand for themselves, the space is 'Ġ' (256 + 32)
    vocab = {"Ġ" if b == 32 else chr(b): i for i, b in enumerate(range(32, 127))}
    vocab["<|endoftext|>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(vocab), n_positions=256, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=len(vocab) - 1, eos_token_id=len(vocab) - 1, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # logits of std ~5 over the normalised hidden state: clear modes, not one-hot
        model.lm_head.weight.normal_(0.0, 1.0)
    path = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def greedy_text(path: str, prompt: str, tokens: int) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id,
                         suppress_tokens=[tokenizer.eos_token_id])
    return tokenizer.decode(out[0], skip_special_tokens=True)


def test_scorer_loads_by_path_and_ranks_the_models_own_output_first(tiny_lm):
    scorer = SamplingDiscrepancy(tiny_lm, max_tokens=128, batch_size=2).load()
    machine = greedy_text(tiny_lm, "T", 120)
    human = ("Rain again this morning, so the market moved indoors; half the stalls never showed up "
             "and the baker ran out of rye by nine.")
    scores = scorer.score([machine, human, "a"])
    assert scores[2] is None  # one token: nothing to score
    assert scores[0] > 5 and scores[0] > scores[1] + 5
    # batching and padding do not change a text's score
    assert scorer.score([human])[0] == pytest.approx(scores[1], rel=1e-4)


def test_reference_model_must_share_the_tokenizer(tiny_lm, tmp_path):
    from transformers import AutoTokenizer

    assert SamplingDiscrepancy(tiny_lm, reference_model=tiny_lm).load().score(["same model twice"])[0] is not None
    other = AutoTokenizer.from_pretrained(tiny_lm)
    other.add_tokens(["<extra>"])
    other.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((Path(tiny_lm) / "config.json").read_text())
    with pytest.raises(ValueError, match="share one tokenizer"):
        SamplingDiscrepancy(tiny_lm, reference_model=str(tmp_path)).load()


def test_synthetic_stage_stores_the_discrepancy_and_drops_by_threshold(tiny_lm):
    import pickle

    import apache_beam as beam
    from apache_beam.utils.windowed_value import WindowedValue

    from pipelines.config import DEFAULTS
    from pipelines.stages import COUNTERS, DROPPED, ScoreSyntheticText

    machine = greedy_text(tiny_lm, "T", 120)
    human = ("Rain again this morning, so the market moved indoors; half the stalls never showed up and the "
             "baker ran out of rye by nine. Nobody minded much.")
    cfg = {**DEFAULTS["synthetic"], "lm_model": tiny_lm, "lm_batch": 4, "lm_discrepancy_threshold": 5.0}
    dofn = pickle.loads(pickle.dumps(ScoreSyntheticText(cfg)))  # as Beam ships it: models load in setup()
    dofn.setup()
    dofn.start_bundle()
    docs = [{"id": f"d{i}", "text": text, "lang": "en", "scores": "{}"} for i, text in enumerate([machine, human])]
    outputs = [o for doc in docs for o in dofn.process(doc)] + list(dofn.finish_bundle())

    def value(out):  # finish_bundle wraps its outputs in a window
        return out.value if isinstance(out, WindowedValue) else out

    tagged = [(o.tag, value(o.value)) for o in outputs if isinstance(o, beam.pvalue.TaggedOutput)]
    kept = [value(o) for o in outputs if not isinstance(o, beam.pvalue.TaggedOutput)]
    dropped = [v for tag, v in tagged if tag == DROPPED]
    tally = dict(v for tag, v in tagged if tag == COUNTERS)
    assert len(outputs) == len(kept) + len(tagged)
    assert [d["id"] for d in kept] == ["d1"] and [d["id"] for d in dropped] == ["d0"]
    assert dropped[0]["reason"] == "llm_generated" and dropped[0]["detail"].startswith("lm_discrepancy")
    assert json.loads(dropped[0]["scores"])["llm_lm_discrepancy"] >= 5.0
    assert json.loads(kept[0]["scores"])["llm_lm_discrepancy"] < 5.0
    assert tally == {"in": 2, "out": 1, "dropped/llm_generated": 1}


def test_curate_score_adds_the_discrepancy_when_an_lm_is_configured(tiny_lm, tmp_path):
    from pipelines.config import DEFAULTS
    from filters.score import TextScorer, score_jsonl

    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"text": "Rain again this morning, so the market moved indoors today."}) + "\n")
    scorer = TextScorer(DEFAULTS["quality"], DEFAULTS["language"], {**DEFAULTS["synthetic"], "lm_model": tiny_lm})
    assert score_jsonl(str(src), str(dst), scorer) == 1
    row = json.loads(dst.read_text())
    assert isinstance(row["llm_lm_discrepancy"], float) and "llm_generated" in row
