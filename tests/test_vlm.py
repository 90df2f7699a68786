"""filters/vlm.py: VlmScorer on a TINY random Idefics3 (SmolVLM architecture) built here, as no weights can
be downloaded. `build_tiny_vlm(path)` is reusable: `from tests.test_vlm import build_tiny_vlm`."""
import ast
import math
import os
import types

import numpy as np
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    PreTrainedTokenizerFast,
)

from filters.vlm import INSTRUCTION, VlmScorer, _answer_tokens

# SmolVLM's chat template (its format, shortened): "<|im_start|>User:<image>...<end_of_utterance>\nAssistant:"
TINY_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
TINY_SIDE = 64  # vision image_size; patch 16, scale_factor 2 -> (64/16)^2 / 2^2 = 4 <image> tokens per image


def build_tiny_vlm(path) -> str:
    """Save a tiny random Idefics3ForConditionalGeneration + Idefics3Processor under `path`; return it as str.

    Tokenizer: byte-level BPE without merges (one token per byte, so "1".."5" are single tokens and " 3" is
    " " + "3", like SmolVLM's), plus the tokens Idefics3Processor needs: <image>, <fake_token_around_image>,
    <end_of_utterance> (it adds them itself if missing), <global-img> and <row_R_col_C> (it only looks these up),
    and <|im_start|> / <|endoftext|> (BOS / EOS = pad). ~300 tokens; model ~300 KB, loads in well under 1 s.
    Weights are deterministic (seed 0) and drawn wide (initializer_range 0.2) so that different documents
    get clearly different ratings. Load with `VlmScorer(path, max_side=64)`.
    """
    path = str(path)
    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    extra = ["<end_of_utterance>", "<image>", "<fake_token_around_image>", "<global-img>"]
    extra += [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>", additional_special_tokens=extra)
    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": TINY_SIDE}, max_image_size={"longest_edge": TINY_SIDE})
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=TINY_CHAT_TEMPLATE)
    config = Idefics3Config(
        text_config=dict(model_type="llama", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id, initializer_range=0.2),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           image_size=TINY_SIDE, patch_size=16, initializer_range=0.2),
        scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    with torch.random.fork_rng():  # deterministic weights without touching the caller's RNG
        torch.manual_seed(0)
        model = Idefics3ForConditionalGeneration(config)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"))


@pytest.fixture(scope="module")
def scorer(tiny_vlm):
    return VlmScorer(tiny_vlm, max_side=TINY_SIDE)


def _image(w, h, seed, mode="RGB"):
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def _in_range(scores):
    return all(isinstance(s, float) and math.isfinite(s) and 1.0 <= s <= 5.0 for s in scores)


def test_scores_in_range_and_distinct(scorer):
    docs = [
        ([_image(64, 64, 1)], "A red bicycle leaning on a wall."),
        ([_image(120, 40, 2), _image(30, 90, 3)], "Two photos of the harbour at dawn, then at noon."),
        ([_image(64, 64, 4)], "BUY NOW cheap cheap cheap click here"),
    ]
    scores = scorer.score(docs)
    assert len(scores) == 3 and _in_range(scores)
    # Random weights still separate documents, by far more than float noise.
    assert min(abs(a - b) for i, a in enumerate(scores) for b in scores[i + 1:]) > 1e-3


@pytest.mark.parametrize("side", ["right", "left"])
def test_batching_does_not_change_scores(scorer, side):
    docs = [
        ([_image(64, 64, 5)], "short"),
        ([_image(200, 100, 6), _image(50, 50, 7)], "a much longer text, " * 30),  # ~600 chars: lots of padding
        ([], "no image at all, medium length text"),
    ]
    tokenizer = scorer.processor.tokenizer
    old, tokenizer.padding_side = tokenizer.padding_side, side
    try:
        batched = scorer.score(docs)
        alone = [scorer.score([d])[0] for d in docs]
    finally:
        tokenizer.padding_side = old
    assert _in_range(batched)
    assert max(abs(a - b) for a, b in zip(batched, alone)) < 1e-4


def test_score_matches_independent_oracle(scorer, tiny_vlm):
    images, text = [_image(64, 64, 8), _image(64, 64, 9)], "A diagram of a heat pump, with labels."
    # The documented prompt, written out by hand (" " after "Assistant:": this tokenizer splits " 3").
    prompt = (f"<|im_start|>User:<image><image>Document text:\n{text}\n\n{INSTRUCTION}<end_of_utterance>\n"
              "Assistant: ")
    processor = AutoProcessor.from_pretrained(tiny_vlm)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm).eval()
    inputs = processor(text=[prompt], images=[images], do_image_splitting=False, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]
    ids = processor.tokenizer.convert_tokens_to_ids(list("12345"))
    p = torch.softmax(torch.log_softmax(logits.double(), -1)[ids], -1)
    expected = float(sum((r + 1) * p[r] for r in range(5)))
    assert scorer.score([(images, text)])[0] == pytest.approx(expected, abs=1e-5)


def test_odd_documents_are_scored(scorer, monkeypatch):
    odd = [
        ([], "text only"),
        ([_image(64, 64, 10)], ""),
        ([], ""),
        ([_image(1000, 200, 11, "L"), _image(40, 300, 12, "RGBA"), _image(64, 64, 13, "P")], "any image mode and shape"),
    ]
    assert _in_range(scorer.score(odd))
    assert scorer.score([]) == []
    # Control strings in a web page's text are removed: no image/placeholder mismatch, no early end of turn.
    im = _image(64, 64, 14)
    dirty, clean = scorer.score([([im], "see <image> here<end_of_utterance><ima<image>ge>"), ([im], "see  here")])
    assert dirty == pytest.approx(clean, abs=1e-6)
    # Text beyond max_text_chars does not count.
    monkeypatch.setattr(scorer, "max_text_chars", 50)
    long_text = "x" * 50
    assert scorer.score([([], long_text + "tail")])[0] == pytest.approx(scorer.score([([], long_text)])[0], abs=1e-6)


def test_errors(tiny_vlm, tmp_path):
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(OSError, match="no_such_model"):
        VlmScorer(missing)
    with pytest.raises(ValueError, match="multiple of"):
        VlmScorer(tiny_vlm, max_side=40)
    two_tokens = types.SimpleNamespace(tokenizer=types.SimpleNamespace(encode=lambda s, add_special_tokens: [7, 8]))
    with pytest.raises(ValueError, match="not a single token"):
        _answer_tokens(two_tokens)


def test_no_beam_import():
    # VlmScorer is not pickled (a DoFn builds it in setup()); the module must stay free of Beam entirely.
    source = open(os.path.join(os.path.dirname(__file__), "..", "filters", "vlm.py")).read()
    imported = {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m.split(".")[0] == "apache_beam" for m in imported)
