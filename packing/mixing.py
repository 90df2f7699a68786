"""Mixing the text and multimodal sets into one corpus at an exact token ratio (DeepSeek-V4.1 report
§1.3: "where the same sample exists as text-only and as multimodal, the multimodal version replaces the
text-only one and takes the larger of the two epoch counts"; text : multimodal tokens = 7 : 1).

Epochs. Every sample has a base epoch count per modality (`pack.mix.epochs`), multiplied, when
`pack.mix.rehydrate` is set, by the factor of the largest cluster size it reaches: a document kept from a
duplicate cluster of s copies stood for s crawled pages (FineWeb2, Penedo et al. 2025, "rehydration":
deduplicated documents are upsampled by the size of the cluster they were kept from).

Twins. A text document and a multimodal document are twins when they are the same page capture (the
same id: the text and interleaved branches key a capture alike) or when one's dedup cluster holds the
other's capture. The multimodal one survives with max(epochs); the text one is dropped as
`replaced_by_multimodal` (packing/mix_transforms.py: ResolveTwins).

Ratio. With T_text and T_mm the tokens (visual tokens included) of each set at its epochs, the set
that is short of the ratio R gets a multiplier m >= 1 (the other keeps 1): m = (T_text / T_mm) / R for
the multimodal set, or R / (T_text / T_mm) for the text set. If m times the set's largest epoch count
exceeds `max_epochs`, m is capped there and the run says `ratio_unreachable`. A sample of epochs e
(after m) goes into the corpus floor(e) times, plus once more when it is chosen for its fraction f =
e - floor(e). The choice is exact: with a uniform hash h(id) in (0, 1], sample i has the key h/f
(smaller is likelier, ~ f), and the samples with the smallest keys are taken until their tokens reach
the set's deficit D = target - Σ floor(e)·n: the realised tokens are within half a sample of the
target. The smallest keys are found with a two-pass weighted quantile (`key_bucket` histogram, then an
exact cut inside the one boundary bucket), so no worker holds more than one bucket of samples.
"""

from __future__ import annotations

import math

import xxhash

from packing.samples import MULTIMODAL, TEXT

GROUPS = ("text", "multimodal")
BUCKETS = 4096
_KEY_SEED = 0x5EED_E90C  # not the phase allocation's seed: which copies are extra must not follow the phase


def group_of(modality: str) -> str:
    return "multimodal" if modality in MULTIMODAL else TEXT


def rehydrated(base: float, cluster_size: int, rehydrate: dict) -> float:
    """Base epochs times the factor of the largest configured cluster size <= cluster_size."""
    factor = 1.0
    for size, f in sorted(rehydrate.items()):
        if cluster_size >= int(size):
            factor = float(f)
    return base * factor


def ratio_plan(totals: dict, ratio: float | None, max_epochs: float) -> dict:
    """Multipliers per group from {group: (epoch-weighted tokens, largest epochs)} (module docstring)."""
    tokens = {g: float(totals.get(g, (0.0, 0.0))[0]) for g in GROUPS}
    largest = {g: float(totals.get(g, (0.0, 0.0))[1]) for g in GROUPS}
    plan = {"target_ratio": ratio, "multipliers": {g: 1.0 for g in GROUPS}, "status": "ok", "status_detail": ""}
    if ratio is None:
        plan.update(status="off", status_detail="pack.mix.text_to_multimodal is null: no balancing")
    elif not tokens["multimodal"] or not tokens["text"]:
        empty = "multimodal" if not tokens["multimodal"] else "text"
        plan.update(status=f"no_{empty}", status_detail=f"no {empty} tokens: nothing to balance")
    else:
        have = tokens["text"] / tokens["multimodal"]
        short, need = ("multimodal", have / ratio) if have >= ratio else ("text", ratio / have)
        if need * largest[short] > max_epochs:
            plan.update(status="ratio_unreachable", status_detail=(
                f"the {short} set is too small: {ratio:g} : 1 needs {need * largest[short]:.3g} epochs of its most "
                f"repeated sample > max_epochs {max_epochs:g}; capped there"))
            need = max_epochs / largest[short]
        plan["multipliers"][short] = need
    plan["targets"] = {g: tokens[g] * plan["multipliers"][g] for g in GROUPS}
    return plan


def split_epochs(epochs: float) -> tuple[int, float]:
    """(whole copies, fraction) of an epoch count."""
    whole = math.floor(epochs)
    return whole, epochs - whole


def extra_key(doc_id: str, fraction: float) -> float:
    """h(id) / f: the order in which samples get their fractional copy (inf: never)."""
    if fraction <= 0:
        return math.inf
    h = (xxhash.xxh64_intdigest(doc_id.encode("utf-8"), _KEY_SEED) + 1) / 2.0 ** 64
    return h / fraction


def key_bucket(key: float) -> int:
    """Monotone bucket in [0, BUCKETS) of a finite key in (0, inf)."""
    return min(BUCKETS - 1, int(key / (1.0 + key) * BUCKETS))


def boundary_bucket(histogram: dict[int, int], deficit: float) -> tuple[int, float]:
    """(bucket b, tokens still wanted inside b): every sample in a bucket below b is taken, those in b
    are cut exactly (`exact_cut`); b = -1: none taken, b = BUCKETS: all."""
    if deficit <= 0:
        return -1, 0.0
    at = 0
    for b in sorted(histogram):
        if at + histogram[b] >= deficit:
            return b, deficit - at
        at += histogram[b]
    return BUCKETS, 0.0


def exact_cut(items: list[tuple[float, str, int]], wanted: float) -> tuple[float, str] | None:
    """The last (key, id) taken from a bucket's (key, id, tokens) so that the tokens taken are as close
    to `wanted` as possible (within half a sample); None: none taken."""
    cut, at = None, 0
    for key, doc_id, n in sorted(items):
        if abs(at + n - wanted) > abs(at - wanted):
            break
        cut, at = (key, doc_id), at + n
    return cut


def copies(doc_id: str, epochs: float, threshold: tuple) -> int:
    """How many times a sample of these (multiplied) epochs goes into the corpus, given its group's
    threshold (boundary bucket, exact cut)."""
    whole, fraction = split_epochs(epochs)
    key = extra_key(doc_id, fraction)
    if math.isinf(key):
        return whole
    bucket, cut = threshold
    b = key_bucket(key)
    taken = b < bucket or (b == bucket and cut is not None and (key, doc_id) <= tuple(cut))
    return whole + int(taken)
