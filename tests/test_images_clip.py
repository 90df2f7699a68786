"""Relevance scoring and embedding dedup through transformers, with a tiny randomly initialised CLIP
built from a config here and loaded by path (no weights can be downloaded in this environment; real
runs point images.relevance.model at a CLIP/SigLIP checkpoint directory or hub name)."""

import json

import numpy as np
import pytest

from pipelines.image_pairs import ImagePairsConfig
from filters.image import ClipScorer, open_image
from extract.images import read_pages_and_images
from tests.test_images_beam import reasons, run_pairs
from tests.test_images_decode import UKWA, ukwa_images

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


def build_tiny_clip(path) -> str:
    """Save a tiny random CLIPModel and its processor under `path`; returns it as str."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    torch.manual_seed(0)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in LETTERS:
        vocab[ch] = len(vocab)
        vocab[ch + "</w>"] = len(vocab)
    config = CLIPConfig(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "max_position_embeddings": 77, "bos_token_id": 0,
                     "eos_token_id": 1, "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
        projection_dim=16)
    processor = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                 crop_size={"height": 32, "width": 32}),
                              tokenizer=CLIPTokenizer(vocab=vocab, merges=[]))
    CLIPModel(config).save_pretrained(path)
    processor.save_pretrained(path)
    return str(path)


def thumbnails():
    """(image bytes, alt) of the four Wikipedia photos that pass at min_side 50."""
    names = {"Nick_Drake": "Nick Drake's grave in Tanworth-in-Arden", "JBA_Acland": "John Acland in 1893",
             "Ma_Ying-jeou": "Ma Ying-jeou", "Periclimenes": "Emperor shrimp"}
    return [(next(b for u, b in ukwa_images().items() if key in u), alt) for key, alt in names.items()]


def test_scorer_loads_by_path_and_scores_cosines(tiny_clip):
    scorer = ClipScorer(tiny_clip)
    cfg = ImagePairsConfig(min_side=50).decode_rules()
    images = [open_image(data, cfg)[0] for data, _ in thumbnails()]
    texts = [alt for _, alt in thumbnails()]
    img, txt = scorer.encode(images, texts)
    assert img.shape == txt.shape == (4, 16)
    assert np.allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    scores = scorer.score(images, texts)
    assert all(-1 <= s <= 1 for s in scores) and len(set(scores)) == 4
    assert np.allclose(scores, scorer.score(images[::-1], texts[::-1])[::-1], atol=1e-5)  # per pair, not per batch
    with pytest.raises(OSError):
        ClipScorer(str(UKWA.parent / "no-such-model"))


@pytest.mark.slow
def test_relevance_threshold_and_embedding_dedup_in_beam(tiny_clip, tmp_path):
    """Threshold between the 2nd and 3rd best scores: two pairs stay relevant; with a cosine threshold
    of -1 every candidate pair (the two share SimHash bands under this seeded model) is a semantic
    duplicate, so the more relevant pair survives."""
    cfg = ImagePairsConfig(min_side=50).decode_rules()
    scorer = ClipScorer(tiny_clip)
    expected = sorted(zip(scorer.score([open_image(d, cfg, 448)[0] for d, _ in thumbnails()],
                                       [a for _, a in thumbnails()]), [a for _, a in thumbnails()]), reverse=True)
    threshold = (expected[1][0] + expected[2][0]) / 2
    assert expected[1][0] - expected[2][0] > 1e-4
    pages, images = read_pages_and_images(UKWA)
    config = {"min_side": 50, "fetch": {"enabled": False},
              "relevance": {"model": tiny_clip, "threshold": threshold, "batch_size": 3},
              "embedding_dedup": {"enabled": True, "threshold": -1.0}}
    pairs, drops, counters, stored = run_pairs(pages, images, config, tmp_path)
    assert [p["alt"] for p in pairs] == [expected[0][1]]
    assert abs(dict(pairs[0]["scores"])["clip"] - expected[0][0]) < 1e-4
    assert reasons(drops)["low_relevance"] == 2 and reasons(drops)["image_semantic_dup"] == 1
    assert counters["images/relevance/scored"] == 4 and "images/relevance/skipped_no_model" not in counters
    assert len(stored) == 1 and "embedding" not in pairs[0]
