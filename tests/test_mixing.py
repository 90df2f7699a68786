"""Samples of every modality (packing/samples.py), chunking that never cuts an image block
(packing/chunk.py), and the exact text : multimodal ratio (packing/mixing.py) against a one-pass oracle."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from packing import mixing
from packing.chunk import INSIDE_IMAGE, PARAGRAPH, ImageBlockTooLong, SampleBoundaries, chunk_ends, split_sample
from packing.samples import ImagePart, encode_samples, image_part, sample_parts
from packing.tokenizer import DocTokenizer
from packing.vision import VisionPolicy, visual_tokens
from tests.test_packing_chunk import real_docs

POLICY = VisionPolicy()


@pytest.fixture(scope="module")
def tok():
    return DocTokenizer()


def _node(kind, text=None, sha=None, w=None, h=None):
    return {"type": kind, "text": text, "image_sha256": sha, "width": w, "height": h}


# ------------------------------------------------------------------------------------------ samples
def test_interleaved_parts_join_text_nodes_and_keep_images_in_place():
    doc = {"nodes": [_node("text", "First."), _node("text", "Second."), _node("image", sha="a" * 64, w=640, h=480),
                     _node("text", ""), _node("image", sha="b" * 64, w=100, h=300), _node("text", "Last.")]}
    parts = sample_parts(doc, "interleaved", POLICY)
    assert parts[0] == "First.\n\nSecond." and parts[-1] == "Last."
    a, b = parts[1], parts[2]
    assert isinstance(a, ImagePart) and isinstance(b, ImagePart) and (a.sha256, b.sha256) == ("a" * 64, "b" * 64)
    assert a.tokens == visual_tokens(640, 480) and b.tokens == visual_tokens(100, 300)
    assert a.tokens == (a.width // 28) * (a.height // 28)


def test_a_pair_is_its_image_then_its_caption():
    parts = sample_parts({"image_sha256": "c" * 64, "width": 800, "height": 600, "alt": "a red kite"}, "pair", POLICY)
    assert parts == [image_part("c" * 64, 800, 600, POLICY), "a red kite"]


def test_encoded_samples_hold_image_blocks_and_the_exact_text_tokens(tok):
    text = real_docs()[0]["text"]
    image = image_part("d" * 64, 544, 544, POLICY)
    plain, mixed = encode_samples(tok, [[text], ["Intro line.", image, text]], tok.info.image_id)
    assert plain.ids.tolist() == tok.encode(text).tolist() and plain.images == []
    start, n, sha, h, w = mixed.images[0]
    assert (n, sha, h, w) == (image.tokens, "d" * 64, image.height, image.width)
    ids = mixed.ids.tolist()
    assert ids[start:start + n] == [tok.info.image_id] * n and tok.info.image_id == 129279
    assert ids[:start] == tok.encode("Intro line.").tolist()[:-1]           # BOS + text, no EOS yet
    assert ids[start + n:] == tok.encode(text).tolist()[1:]                 # text + EOS, no second BOS
    assert [s for s, _ in mixed.texts] == [1, start + n]


# --------------------------------------------------------------------------------------- chunking
def test_no_chunk_ever_ends_inside_an_image_block(tok):
    """Samples of real text with blocks of 400-2,304 visual tokens, cut at limits around the block
    sizes: every chunk is within the limit, the chunks tile the sample, no cut inside a block."""
    rng = random.Random(5)
    texts = [d["text"] for d in real_docs()[:12]]
    samples = []
    for k in range(12):
        parts = []
        for _ in range(rng.randint(1, 4)):
            parts.append(rng.choice(texts))
            side = rng.choice([544, 600, 800, 1344])
            parts.append(image_part(f"{k:064x}", side, rng.choice([544, 700, 1000]), POLICY))
        samples.append(parts)
    for enc in encode_samples(tok, samples, tok.info.image_id):
        for limit in (2600, 4096, 8192):
            ends = split_sample(len(enc.ids), limit, 512, lambda: SampleBoundaries(enc.texts, enc.images,
                                                                                    tok.text_offsets))
            starts = [0] + ends[:-1]
            assert ends[-1] == len(enc.ids) and all(0 < b - a <= limit for a, b in zip(starts, ends))
            for start, n, *_ in enc.images:
                assert not any(start < e < start + n for e in ends), (start, n, ends)


def test_a_window_inside_a_block_cuts_before_it_and_a_block_over_the_limit_is_an_error():
    def boundary(p):  # tokens 50..89 are one image
        return PARAGRAPH if p in (50, 90) else INSIDE_IMAGE if 50 < p < 90 else 0
    # the window (56, 64] is inside the block: cut right before it; then the block starts a chunk
    assert chunk_ends(200, 64, 8, boundary) == [50, 114, 178, 200]
    with pytest.raises(ImageBlockTooLong):
        chunk_ends(200, 64, 8, lambda p: INSIDE_IMAGE if 0 < p < 100 else PARAGRAPH)


# ------------------------------------------------------------------------------------------ ratio
def test_the_short_set_is_multiplied_up_to_the_ratio_and_capped_with_a_status():
    plan = mixing.ratio_plan({"text": (7000.0, 1.0), "multimodal": (500.0, 1.0)}, 7.0, 8.0)
    assert plan["status"] == "ok" and plan["multipliers"] == {"text": 1.0, "multimodal": 2.0}
    assert plan["targets"]["text"] == 7 * plan["targets"]["multimodal"]
    plan = mixing.ratio_plan({"text": (3500.0, 1.0), "multimodal": (1000.0, 1.0)}, 7.0, 8.0)
    assert plan["multipliers"] == {"text": 2.0, "multimodal": 1.0}
    capped = mixing.ratio_plan({"text": (1e6, 1.0), "multimodal": (100.0, 2.0)}, 7.0, 8.0)
    assert capped["status"] == "ratio_unreachable" and capped["multipliers"]["multimodal"] == 4.0
    assert "max_epochs" in capped["status_detail"]
    assert mixing.ratio_plan({"text": (10.0, 1.0)}, 7.0, 8.0)["status"] == "no_multimodal"
    assert mixing.ratio_plan({"text": (10.0, 1.0), "multimodal": (1.0, 1.0)}, None, 8.0)["status"] == "off"


def test_rehydration_takes_the_factor_of_the_largest_size_reached():
    table = {2: 2.0, 5: 3.0}
    assert [mixing.rehydrated(1.0, s, table) for s in (1, 2, 4, 5, 90)] == [1.0, 2.0, 2.0, 3.0, 3.0]
    assert mixing.rehydrated(0.5, 9, {}) == 0.5


def _two_pass(samples, target):
    """The Beam transform's arithmetic on plain lists: histogram, boundary bucket, exact cut, copies."""
    whole = sum(math.floor(e) * n for _, n, e in samples)
    keyed = [(mixing.extra_key(i, e - math.floor(e)), i, n) for i, n, e in samples]
    histogram: dict[int, int] = {}
    for key, _, n in keyed:
        if not math.isinf(key):
            histogram[mixing.key_bucket(key)] = histogram.get(mixing.key_bucket(key), 0) + n
    bucket, wanted = mixing.boundary_bucket(histogram, target - whole)
    cut = mixing.exact_cut([k for k in keyed if not math.isinf(k[0]) and mixing.key_bucket(k[0]) == bucket], wanted)
    return {i: mixing.copies(i, e, (bucket, cut)) for i, _, e in samples}


@pytest.mark.parametrize("multiplier", [1.0, 1.37, 2.5, 6.02])
def test_fractional_epochs_reach_the_target_within_half_a_sample_and_match_the_oracle(multiplier):
    """Real-like lengths (log-normal, 20..60k tokens) and mixed base epochs: the realised tokens are
    within half of the largest sample of the target, and the copies equal those of a one-pass oracle
    that sorts every sample by its key."""
    rng = np.random.default_rng(int(multiplier * 100))
    samples = [(f"doc{i}", int(np.clip(rng.lognormal(6.5, 1.2), 20, 60000)), float(rng.choice([1.0, 1.5, 2.0])) * multiplier)
               for i in range(3000)]
    target = sum(n * e for _, n, e in samples)
    got = _two_pass(samples, target)
    realised = sum(n * got[i] for i, n, _ in samples)
    assert abs(realised - target) <= max(n for _, n, _ in samples) / 2
    # oracle: every sample's key in one sorted list, taken while that gets closer to the deficit
    deficit = target - sum(math.floor(e) * n for _, n, e in samples)
    order = sorted((mixing.extra_key(i, e - math.floor(e)), i, n) for i, n, e in samples)
    taken, at = set(), 0
    for key, i, n in order:
        if math.isinf(key) or abs(at + n - deficit) > abs(at - deficit):
            break
        taken.add(i)
        at += n
    assert got == {i: math.floor(e) + (i in taken) for i, _, e in samples}
    for i, _, e in samples:  # never fewer than the whole epochs, never more than one extra
        assert math.floor(e) <= got[i] <= math.floor(e) + 1
