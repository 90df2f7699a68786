"""The labelled texts the model-generated-content scorers learn from and are judged on, with their splits.

Splits never cut by random rows: held-out generators/systems AND held-out source items (a fast-detect-gpt
human original with all its machine continuations; a TED talk with all its translations) are disjoint
from training, so the held-out figures measure unseen generators, not memorised sources. Inputs under
data_dir: llm_detect/fast_detect_gpt (human/machine pairs, 8 generators), llm_detect/authenticheck_asap
(evaluation only), mt_quality/wmt_mqm_ted (MT with MQM annotations, human refs, English sources),
mt_quality/mt_detection_zh_en (SMT vs human), html/scrapinghub_aeb (real human web pages).
"""

from __future__ import annotations

import csv
import glob
import gzip
import hashlib
import json
import os
import random
import re
from collections import defaultdict

import numpy as np

# ---------------------------------------------------------------------------------------------- splits
LLM_TEST_GENERATORS = ("gpt-4", "gpt-neox-20b", "opt-2.7b")  # never trained on
MT_TEST_SYSTEMS = {"ende": ("Online-W", "UEdin", "metricsystem4"), "zhen": ("Online-W", "NiuTrans", "metricsystem2")}
# TED talks are the same 5 English talks in both pairs (ende talk.N <-> zhen talk.M); key = ende name.
ZHEN_TO_ENDE_TALK = {"talk.2": "talk.1", "talk.5": "talk.3", "talk.6": "talk.4", "talk.7": "talk.5", "talk.9": "talk.6"}
TED_TEST_TALKS = ("talk.3", "talk.4")  # held out, in both pairs, with every system's translation of them
ITEM_TEST_FOLD = 0  # fast-detect-gpt items with fold(group) == 0 are test items (20%)
N_FOLDS = 5

MQM_POOR_SEGMENT = -5.0  # a segment with MQM <= -5 has (at least) one Major error


def _h(s: str) -> int:
    return int(hashlib.sha1(s.encode("utf-8")).hexdigest()[:12], 16)


def fold(group: str) -> int:
    """The source group's fold: a stable hash, so a group's items always land together."""
    return _h(group) % N_FOLDS


# ------------------------------------------------------------------------------------------ text utils
def cut_to_sentence(text: str) -> str:
    """Drop a trailing incomplete sentence (the sources are cut at a token budget)."""
    text = " ".join(text.split())
    best = max(text.rfind(c) for c in ".!?。！？")
    if best < len(text) * 0.5:
        return text
    end = best + 1
    while end < len(text) and text[end] in "\"'”’)":
        end += 1
    return text[:end]


def strip_prefix(text: str, n_words: int) -> str:
    """Remove the first n_words words and the rest of the sentence they end in."""
    words = text.split()
    rest = " ".join(words[n_words:])
    m = re.search(r"[.!?][\"'”’)]*\s+", rest)
    rest = rest[m.end():] if m and m.start() < 400 else rest
    return rest


_ASAP_TAG = re.compile(r"@([A-Z]+)\d*")
_ASAP_FILL = {"PERSON": "Alex", "CAPS": "Jordan", "LOCATION": "Springfield", "CITY": "Springfield",
              "STATE": "Ohio", "ORGANIZATION": "the company", "DATE": "Monday", "TIME": "noon", "MONTH": "May",
              "NUM": "ten", "PERCENT": "ten percent", "MONEY": "ten dollars", "EMAIL": "my email", "DR": "Dr. Lee"}


def detok_ptb(s: str) -> str:
    """MT-Detection sentences are lower-cased PTB tokens; undo the tokenisation (casing: first letter, 'i')."""
    s = s.replace("-lrb-", "(").replace("-rrb-", ")").replace("``", '"').replace("''", '"')
    s = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", s)
    s = re.sub(r" ([,.;:!?%)])", r"\1", s)
    s = re.sub(r"([($]) ", r"\1", s)
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    s = re.sub(r"\bi\b", "I", s)
    return s[:1].upper() + s[1:]


# ------------------------------------------------------------------------------------------ data: llm
def _item(text, label, source, system, group, lang="en", split="train", **kw):
    return dict(text=text, label=label, source=source, system=system, group=group, lang=lang, split=split, **kw)


def load_fast_detect_gpt(data_dir: str) -> list[dict]:
    """Human continuations (one per source item) and machine continuations, shared prefix removed."""
    items, seen_human = [], set()
    files = sorted(glob.glob(os.path.join(data_dir, "llm_detect/fast_detect_gpt/exp_*/data/*.raw_data.json")))
    for path in files:
        dataset, generator = os.path.basename(path)[: -len(".raw_data.json")].split("_", 1)
        with open(path) as fh:
            data = json.load(fh)
        for orig, samp in zip(data["original"], data["sampled"]):
            group = f"fdg:{dataset}:{_h(' '.join(orig.split()[:40]))}"
            ow, sw = orig.split(), samp.split()
            k = 0
            while k < min(len(ow), len(sw)) and ow[k] == sw[k]:
                k += 1
            machine = cut_to_sentence(strip_prefix(samp, k))
            if len(machine.split()) >= 25:
                items.append(_item(machine, 1, f"fdg:{dataset}", generator, group))
            if group not in seen_human:
                human = cut_to_sentence(strip_prefix(orig, k))
                if len(human.split()) >= 25:
                    seen_human.add(group)
                    items.append(_item(human, 0, f"fdg:{dataset}", "human", group))
    for it in items:
        test_item = fold(it["group"]) == ITEM_TEST_FOLD
        held_gen = it["system"] in LLM_TEST_GENERATORS
        if it["label"] == 0:
            it["split"] = "test" if test_item else "train"
        elif test_item:
            it["split"] = "test" if held_gen else "test_seen_generator"
        else:
            it["split"] = "unused" if held_gen else "train"
    return items


def load_asap(data_dir: str) -> list[dict]:
    """AuthentiCheck: ASAP student essays (human) vs ChatGPT essays: evaluation only."""
    items = []
    path = os.path.join(data_dir, "llm_detect/authenticheck_asap/test.jsonl")
    if not os.path.exists(path):
        return items
    with open(path) as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            text = _ASAP_TAG.sub(lambda m: _ASAP_FILL.get(m.group(1), "Jordan"), row["answer"])
            text = " ".join(text.split())
            if len(text.split()) < 25:
                continue
            gpt = bool(row["chatgpt"])
            items.append(_item(text, int(gpt), "asap", "chatgpt" if gpt else "human", f"asap:{i}", split="test_asap"))
    return items


# ------------------------------------------------------------------------------------------- data: mt
def _seg_penalty(category: str, severity: str) -> float:
    sev = severity.strip().lower()
    if sev == "major":
        return 25.0 if "non-translation" in category.lower() else 5.0
    if sev == "minor":
        return 0.1 if "punctuation" in category.lower() else 1.0
    return 0.0


def load_ted(data_dir: str, pair: str) -> dict:
    """{(system, seg): {"text", "mqm", "talk", "source"}}; mqm = -(MQM penalty), mean over raters."""
    path = os.path.join(data_dir, f"mt_quality/wmt_mqm_ted/mqm_ted_{pair}.tsv")
    pen = defaultdict(lambda: defaultdict(float))
    segs = {}
    with open(path, newline="") as fh:
        rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        for r in rows:
            system, talk, seg, rater, source, target, category, severity = r[0], r[1], int(r[3]), r[4], r[5], r[6], r[7], r[8]
            key = (system, seg)
            pen[key][rater] += _seg_penalty(category, severity)
            if key not in segs:
                talk = ZHEN_TO_ENDE_TALK.get(talk, talk) if pair == "zhen" else talk
                segs[key] = {"text": re.sub(r"</?v>", "", target).strip(), "talk": talk, "source": source.strip()}
    for key, s in segs.items():
        s["mqm"] = -sum(pen[key].values()) / max(len(pen[key]), 1)
    return segs


def _blocks(seq: list, rng: random.Random, lo: int, hi: int) -> list[list]:
    out, i = [], 0
    while i < len(seq):
        k = rng.randint(lo, hi)
        if len(seq) - i - k < lo:  # fold a short tail into the last block
            k = len(seq) - i
        out.append(seq[i:i + k])
        i += k
    return out


def load_mt(data_dir: str, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for pair, lang in (("ende", "de"), ("zhen", "en")):
        segs = load_ted(data_dir, pair)
        by_sys_talk = defaultdict(list)
        for (system, seg), s in sorted(segs.items()):
            by_sys_talk[(system, s["talk"])].append((seg, s))
        for (system, talk), rows in sorted(by_sys_talk.items()):
            split = "test" if talk in TED_TEST_TALKS else "train"
            human = system.startswith("ref")
            if not human and (system in MT_TEST_SYSTEMS[pair]) != (split == "test"):
                split = "unused"  # held-out systems only on held-out talks; train systems only on train talks
            src = f"ted_{pair}"
            if human:
                for off in (0, 1):  # two different block cuts of the human reference
                    for blk in _blocks(rows[off * 3:], rng, 5, 12):
                        items.append(_item(" ".join(s["text"] for _, s in blk), 0, src, system, f"ted:{talk}", lang,
                                           split, mqm=float(np.mean([s["mqm"] for _, s in blk])), kind="human_ref"))
                continue
            poor = [(seg, s) for seg, s in rows if s["mqm"] <= MQM_POOR_SEGMENT]
            for blk in _blocks(poor, rng, 3, 8):
                if len(blk) >= 3:
                    items.append(_item(" ".join(s["text"] for _, s in blk), 1, src, system, f"ted:{talk}", lang, split,
                                       mqm=float(np.mean([s["mqm"] for _, s in blk])), kind="poor_mt"))
            for blk in _blocks(rows, rng, 5, 12):  # ordinary consecutive MT output: evaluation category only
                mqm = float(np.mean([s["mqm"] for _, s in blk]))
                items.append(_item(" ".join(s["text"] for _, s in blk), -1, src, system, f"ted:{talk}", lang,
                                   split if split == "test" else "unused", mqm=mqm, kind="mt_all"))
        if pair == "ende":  # English TED sources: native English of the same talks (realistic negatives)
            src_rows = defaultdict(list)
            for (system, seg), s in sorted(segs.items()):
                if system == "ref":
                    src_rows[s["talk"]].append(s["source"])
            for talk, sents in sorted(src_rows.items()):
                split = "test" if talk in TED_TEST_TALKS else "train"
                for off in (0, 2):
                    for blk in _blocks(sents[off:], rng, 5, 12):
                        items.append(_item(" ".join(blk), 0, "ted_en_source", "native", f"ted:{talk}", "en", split,
                                           kind="native"))
    # MT-Detection zh-en: older SMT (M) vs human translation (H) + references; file-level split.
    for fname, split in (("train.txt", "train"), ("test.txt", "test")):
        path = os.path.join(data_dir, "mt_quality/mt_detection_zh_en", fname)
        if not os.path.exists(path):
            continue
        blocks = [b.split("\n") for b in open(path, encoding="utf-8").read().strip().split("\n\n")]
        cands = {"H": [], "M": []}
        refs = []
        for b in blocks:
            b = [x.strip() for x in b if x.strip()]
            if len(b) < 5:
                continue
            cands[b[4]].append(detok_ptb(b[1]))
            refs.append(detok_ptb(b[2]))
        for label, sents, kind in ((1, cands["M"], "poor_mt"), (0, cands["H"], "human_ref"), (0, refs, "human_ref")):
            for j, blk in enumerate(_blocks(sents, rng, 5, 10)):
                items.append(_item(" ".join(blk), label, "mtdet_zhen", "smt" if label else "human",
                                   f"mtdet:{fname}:{kind}:{j}", "en", split, kind=kind))
    return items


def load_wmt_sxs(folder: str, seed: int = 0) -> list[dict]:
    """Held-out MT of another year, other systems and another domain: the side-by-side MQM ratings of the
    WMT 2023 general task (github.com/google/wmt-mqm-human-evaluation, generalMT2023/<pair>/
    sxs_mqm_generalMT2023_<pair>.3ratingsPerSegment.tsv, extracted from its .tar.gz; news, nine to ten
    systems per pair, GPT-4 among them, and for en-de the human reference refA). Blocks cut as load_mt
    cuts TED: poor MT (3-8 of one system's segments of one document with MQM <= MQM_POOR_SEGMENT, in order),
    the reference's blocks (5-12 segments), and every system's consecutive blocks (label -1). Split
    "external": no scorer is fitted on it."""
    rng = random.Random(seed)
    items = []
    for pair, lang in (("ende", "de"), ("zhen", "en")):
        path = os.path.join(folder, f"sxs_mqm_generalMT2023_{pair}.3ratingsPerSegment.tsv")
        if not os.path.exists(path):
            continue
        pen = defaultdict(lambda: defaultdict(float))
        segs = {}
        with open(path, newline="", encoding="utf-8") as fh:
            rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            next(rows)
            for r in rows:
                system, doc, seg, rater, target, category, severity = r[0], r[1], int(r[2]), r[4], r[6], r[7], r[8]
                if severity == "HOTW-test":  # the raters' attention checks, not ratings
                    continue
                key = (system, doc, seg)
                pen[key][rater] += _seg_penalty(category, severity)
                segs.setdefault(key, re.sub(r"</?v>", "", target).strip())
        by_doc = defaultdict(list)
        for key, text in sorted(segs.items()):
            by_doc[key[:2]].append((text, -sum(pen[key].values()) / max(len(pen[key]), 1)))
        src = f"wmt23_{pair}"
        for (system, doc), rows in sorted(by_doc.items()):
            def block(blk, label, kind):
                return _item(" ".join(t for t, _ in blk), label, src, system, f"wmt23:{doc}", lang, "external",
                             mqm=float(np.mean([m for _, m in blk])), kind=kind)
            if system.startswith("ref"):
                items += [block(blk, 0, "human_ref") for blk in _blocks(rows, rng, 5, 12)]
                continue
            poor = [row for row in rows if row[1] <= MQM_POOR_SEGMENT]
            items += [block(blk, 1, "poor_mt") for blk in _blocks(poor, rng, 3, 8) if len(blk) >= 3]
            items += [block(blk, -1, "mt_all") for blk in _blocks(rows, rng, 5, 12)]
    return items


def load_web_pages(data_dir: str) -> list[dict]:
    """Real human web pages (scrapinghub article-extraction benchmark), extracted like the pipeline does
    (decode_html -> resiliparse main text -> C4 policy-line filter), real boilerplate included.
    Half the pages (by file hash) train, half are held out."""
    from extract.html import decode_html, extract_main_text
    from filters.clean import remove_boilerplate_lines
    from filters.language import LanguageIdentifier

    items = []
    paths = sorted(glob.glob(os.path.join(data_dir, "html/scrapinghub_aeb/html/*.html.gz")))
    if not paths:
        return items
    lid = LanguageIdentifier()
    for path in paths:
        try:
            with gzip.open(path, "rb") as fh:
                text = extract_main_text(decode_html(fh.read(), "").text, "resiliparse", 5000)
        except Exception:
            continue
        text, _ = remove_boilerplate_lines(text.strip())
        if len(text.split()) < 50:
            continue
        group = "web:" + os.path.basename(path).split(".")[0]
        items.append(_item(text, 0, "web_scrapinghub", "human", group, lid(text)[0],
                           "test" if _h(group) % 2 == 0 else "train", raw_page=True, kind="native"))
    return items


def load_data(kind: str, data_dir: str, seed: int = 0) -> list[dict]:
    if kind == "llm":
        items = load_fast_detect_gpt(data_dir) + load_asap(data_dir)
        items += [it for it in load_web_pages(data_dir) if it["lang"] == "en"]
        for it in load_mt(data_dir, seed):  # human English of other registers: TED talks, translations
            if it["label"] == 0 and it["lang"] == "en":
                items.append({**it, "source": "ted_en_source" if it["kind"] == "native" else f"{it['source']}_human"})
        return items
    if kind == "mt":
        items = load_mt(data_dir, seed)
        for it in load_fast_detect_gpt(data_dir):  # native English (news, wiki, stories, pubmed)
            if it["label"] == 0:
                items.append({**it, "system": "native", "kind": "native"})
        items += [it for it in load_web_pages(data_dir) if it["lang"] in ("en", "de")]
        return items
    raise ValueError(f"kind must be 'llm' or 'mt', not {kind!r}")


