"""The run report: OUT/report.html, one self-contained page (plotly.js inlined: no network when it is
viewed), and OUT/report.md, the same figures as tables for a terminal. Written at the end of every run
and by `curate report OUT`.

What it shows: the per-stage funnel and every drop reason; a histogram of every stored score with its
configured threshold drawn on it (each quality rule's value, language-ID probability per language,
llm_generated and poor_mt, the VLM rating), split into the documents a threshold kept and dropped;
language and length distributions; dedup cluster sizes; image sizes, formats and duplicate counts;
tokens, padding and status per packing phase and the text : multimodal ratio; and for each drop reason
a few example documents (escaped, truncated, with their WARC file and offset).

Why plotly: a data engineer choosing a threshold wants to hover a bar for its count and zoom into the
tail, which static images do not give; plotly.js ships inside the pinned plotly wheel, so the page
needs no network, and figures are plain JSON (binned here with numpy: the page holds counts, never one
value per document). The report reads at most `max_rows` rows of each output folder (the first ones):
on a large run the histograms are of that sample, which the page says.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
from apache_beam.io.filesystems import FileSystems

from pipelines import io

BINS = 40
EXAMPLES = 3
EXAMPLE_CHARS = 400
REACHES_QUALITY = ("quality", "synthetic", "exact_dedup", "near_dedup", "crosslingual", "write")  # dropped at or after quality


# ------------------------------------------------------------------------------------------- reading
def _dataset(root: str, folder: str) -> ds.Dataset | None:
    """The Parquet files under OUT/folder as one dataset, or None where there is none to read."""
    path = io.join(root, folder)
    if not FileSystems.exists(path):
        return None
    try:
        return ds.dataset(path, format="parquet")
    except (FileNotFoundError, OSError, ValueError):
        return None


def _rows(root: str, folder: str, columns: list[str], max_rows: int) -> list[dict]:
    """Up to max_rows rows of the Parquet files under OUT/folder (only `columns` that exist)."""
    dataset = _dataset(root, folder)
    if dataset is None:
        return []
    names = [c for c in columns if c in dataset.schema.names]
    out: list[dict] = []
    for batch in dataset.to_batches(columns=names):
        out += batch.slice(0, max_rows - len(out)).to_pylist()
        if len(out) >= max_rows:
            break
    return out


def _examples(root: str, stage: str, wanted: set[str], max_rows: int) -> dict[str, list[dict]]:
    """{reason: the first EXAMPLES rows of OUT/dropped/<stage> dropped for it}, for each of the `wanted`
    reasons, among the folder's first max_rows rows. The reasons are read first, then only the rows taken (a
    large run drops hundreds of thousands of documents, their texts with them)."""
    dataset = _dataset(root, f"dropped/{stage}")
    if dataset is None:
        return {}
    columns = [c for c in ("reason", "detail", "url", "warc_file", "warc_offset", "text") if c in dataset.schema.names]
    if "reason" not in columns:
        return {}
    reasons = dataset.to_table(columns=["reason"]).slice(0, max_rows).column("reason")
    taken = sorted(index for reason in wanted
                   for index in np.flatnonzero(pc.fill_null(pc.equal(reasons, reason), False).to_numpy(
                       zero_copy_only=False))[:EXAMPLES].tolist())
    found: dict[str, list[dict]] = defaultdict(list)
    for row in dataset.take(taken, columns=columns).to_pylist() if taken else ():
        found[row["reason"]].append(row)
    return dict(found)


@dataclass
class ScoreRows:
    """The rows of some output folders, in columns: each row's folder (its index in the list read), stage and
    reason (None in a folder without them: the final documents), and every entry of their `scores` maps,
    grouped by key: {key: (rows, values)}, rows ascending, a missing value as NaN. Columns, because a large run
    has hundreds of thousands of rows with dozens of scores each."""

    folder: np.ndarray
    stage: np.ndarray
    reason: np.ndarray
    entries: dict[str, tuple[np.ndarray, np.ndarray]]

    def labelled(self, key: str, labels: np.ndarray, names: list[str]) -> dict:
        """{name: the values of `key`} by each row's label (`labels`: an index into `names` per row, -1 for a
        row left out), the names in the order of their first row, as a scan of the rows would meet them."""
        found, values = self.entries.get(key, (np.empty(0, np.int64), np.empty(0)))
        label = labels[found]
        kept = label >= 0
        label, values = label[kept], values[kept]
        present, first = np.unique(label, return_index=True)
        return {names[code]: values[label == code] for code in present[np.argsort(first)]}


def read_scores(root: str, folders: list[str], max_rows: int) -> ScoreRows:
    """ScoreRows of the first max_rows rows of each of OUT/<folder> (a missing folder has none). Each Parquet
    chunk's map entries are read through its offsets, its keys dictionary-encoded (a few dozen distinct)."""
    folder, stage, reason, codes, values, rows, base, names = [], [], [], [], [], [], 0, {}
    for index, name in enumerate(folders):
        dataset = _dataset(root, name)
        present = [c for c in ("stage", "reason", "scores") if dataset is not None and c in dataset.schema.names]
        if not present:  # no folder, an empty one (no file, so no schema) or rows without any of them
            continue
        table = dataset.to_table(columns=present).slice(0, max_rows)
        n = table.num_rows
        folder.append(np.full(n, index))
        for column, out in (("stage", stage), ("reason", reason)):
            out.append(table.column(column).to_numpy(zero_copy_only=False) if column in present
                       else np.full(n, None, dtype=object))
        row = base  # of the chunk's first row
        for chunk in table.column("scores").chunks if "scores" in present else ():
            offsets = chunk.offsets.to_numpy()
            first, size = int(offsets[0]), int(offsets[-1] - offsets[0])
            lengths = np.diff(offsets)
            valid = np.ones(len(chunk), bool) if not chunk.null_count else chunk.is_valid().to_numpy(zero_copy_only=False)
            kept = np.repeat(valid, lengths)  # a null map's slots, if it has any, hold nothing
            encoded = pc.dictionary_encode(chunk.keys.slice(first, size))
            to_global = np.array([names.setdefault(k, len(names)) for k in encoded.dictionary.to_pylist()], np.int64)
            codes.append(to_global[encoded.indices.to_numpy()][kept])
            values.append(chunk.items.slice(first, size).to_numpy(zero_copy_only=False).astype(float)[kept])
            rows.append(row + np.repeat(np.arange(len(chunk)), lengths)[kept])
            row += len(chunk)
        base += n
    entries = {}
    if codes:
        codes, rows, values = np.concatenate(codes), np.concatenate(rows), np.concatenate(values)
        order = np.argsort(codes.astype(np.uint16) if len(names) <= 1 << 16 else codes, kind="stable")  # radix
        key_of = {code: key for key, code in names.items()}
        for part in np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if order.size else ():
            entries[key_of[int(codes[part[0]])]] = (rows[part], values[part])
    empty = np.empty(0, dtype=object)
    return ScoreRows(np.concatenate(folder) if folder else np.empty(0, int), np.concatenate(stage) if stage else empty,
                     np.concatenate(reason) if reason else empty, entries)


# ---------------------------------------------------------------------------------------- histograms
def histogram(groups: dict[str, list[float]], threshold: float | None = None, log: bool = False) -> dict:
    """Shared bins over every group's values (and the threshold): {"edges", "counts": {group: [...]}}."""
    arrays = {g: np.asarray(vs, float) for g, vs in groups.items()}  # None as NaN: neither bins nor counts hold it
    values = np.concatenate([a[np.isfinite(a)] for a in arrays.values()]) if arrays else np.empty(0)
    if not values.size:
        return {"edges": [], "counts": {}}
    lo, hi = float(values.min()), float(values.max())
    if threshold is not None and math.isfinite(threshold):
        lo, hi = min(lo, threshold), max(hi, threshold)
    if log:
        lo, hi = max(lo, 1.0), max(hi, 1.0)
        edges = np.geomspace(lo, hi * 1.0001 if hi > lo else lo * 2, BINS + 1)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1, BINS + 1)
    counts = {g: np.histogram(np.clip(a, edges[0], edges[-1]), edges)[0].tolist() for g, a in arrays.items() if a.size}
    return {"edges": edges.tolist(), "counts": counts}


def _hist_figure(title: str, hist: dict, threshold: float | None = None, rule: str = "", log: bool = False) -> dict:
    edges = hist["edges"]
    centers = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
    widths = [b - a for a, b in zip(edges, edges[1:])]
    data = [{"type": "bar", "name": g, "x": centers, "y": c, "width": widths} for g, c in hist["counts"].items()]
    layout = {"title": {"text": title}, "barmode": "stack", "height": 300, "margin": {"t": 40, "b": 40},
              "xaxis": {"type": "log" if log else "linear"}, "yaxis": {"title": {"text": "documents"}}}
    if threshold is not None and edges:
        layout["shapes"] = [{"type": "line", "x0": threshold, "x1": threshold, "yref": "paper", "y0": 0, "y1": 1,
                             "line": {"color": "crimson", "width": 2, "dash": "dash"}}]
        layout["annotations"] = [{"x": threshold, "yref": "paper", "y": 1.05, "showarrow": False,
                                  "text": f"threshold {threshold:g} {rule}".strip(), "font": {"color": "crimson"}}]
    return {"data": data, "layout": layout}


def _bar_figure(title: str, labels: list, series: dict[str, list], horizontal: bool = False, height: int = 320) -> dict:
    data = [({"type": "bar", "name": name, "y": labels, "x": values, "orientation": "h"} if horizontal else
             {"type": "bar", "name": name, "x": labels, "y": values}) for name, values in series.items()]
    layout = {"title": {"text": title}, "barmode": "group", "height": height, "margin": {"t": 40, "l": 160}}
    if horizontal:
        layout["yaxis"] = {"autorange": "reversed"}
    return {"data": data, "layout": layout}


# ------------------------------------------------------------------------------------------- collect
def _quality_figures(scores: ScoreRows, cfg: dict) -> list[dict]:
    """Every quality rule's value over `scores` (the documents that reached the quality stage: its drops,
    later stages' drops, the final documents with stage None), with its threshold."""
    from filters.quality import RULES

    reasons = sorted({r for r in scores.reason[scores.stage == "quality"] if r is not None})
    code = {r: i for i, r in enumerate(reasons)}
    dropped_for = np.array([code[r] if st == "quality" and r is not None else -1
                            for st, r in zip(scores.stage, scores.reason)], dtype=np.int64)
    figures, section = [], cfg.get("quality") or {}
    for rule in RULES:
        entries = sorted(dict(section.get(rule.field) or ()).items()) if rule.kind == "per_n" else [(None, None)]
        for n, per_n_threshold in entries:
            key = rule.value.format(n=n) if n is not None else rule.value
            reason = rule.reason.format(n=n) if n is not None else rule.reason
            if rule.kind == "per_n":
                threshold = per_n_threshold
            elif rule.kind == "switch":
                threshold = rule.fixed if section.get(rule.field, rule.default) else None
            else:
                threshold = section.get(rule.field, rule.default)
            labels = np.where(dropped_for < 0, 0, np.where(dropped_for == code.get(reason, -2), 1, 2))
            groups = scores.labelled(key, labels, ["passed quality", f"dropped: {reason}", "dropped: another quality rule"])
            if groups:
                title = f"quality · {key}" + ("" if threshold is not None else " (rule off)")
                figures.append(_hist_figure(title, histogram(groups, threshold), threshold, f"(fails if {rule.fails})"))
    return figures


def _synthetic_thresholds(cfg: dict) -> dict:
    try:
        from filters.synthetic import SyntheticTextScorer, drop_thresholds
        from pipelines.stages import SyntheticConfig

        section = SyntheticConfig.model_validate(cfg["synthetic"])
        scorer = SyntheticTextScorer(section.llm_model, section.mt_model, section.max_chars).load()
        return drop_thresholds(scorer.thresholds(), section)
    except Exception:  # a report must not fail on a model it cannot open; the plots then lack the line
        return {}


def collect(root: str, cfg: dict, max_rows: int = 100_000, summary: dict | None = None) -> dict:
    """Every figure and table of the report, as plain data; `summary`: the run's (else stats/summary.json)."""
    summary = summary or io.read_json(io.join(root, "stats", "summary.json"))
    if summary is None:
        raise FileNotFoundError(f"no run in {root}: stats/summary.json is missing")
    stages = summary["stages"]
    figures: dict[str, list] = defaultdict(list)
    names = [s["stage"] for s in stages]
    figures["funnel"].append(_bar_figure("documents in and out per stage", names,
                                         {"in": [s["in"] for s in stages], "out": [s["out"] for s in stages]},
                                         horizontal=True, height=40 + 26 * len(names)))
    for s in stages:
        if s["dropped"]:
            reasons = sorted(s["dropped"], key=lambda r: -s["dropped"][r])
            figures["drops"].append(_bar_figure(f"{s['stage']}: drop reasons", reasons,
                                                {"dropped": [s["dropped"][r] for r in reasons]},
                                                horizontal=True, height=60 + 22 * len(reasons)))
    text = _rows(root, "docs/text", ["lang", "lang_score"], max_rows)
    # read once: the quality, synthetic and length plots share them; the final documents last, stage None
    reached = read_scores(root, [f"dropped/{stage}" for stage in REACHES_QUALITY] + ["docs/text"], max_rows)
    figures["quality"] = _quality_figures(reached, cfg)
    lang_drops = _rows(root, "dropped/language", ["detail"], max_rows)
    by_lang = defaultdict(lambda: defaultdict(list))
    for r in text:
        by_lang[r["lang"]]["final documents"].append(r["lang_score"])
    for r in lang_drops:
        lang, _, score = (r["detail"] or "").partition(":")
        try:
            by_lang[lang]["dropped: language"].append(float(score))
        except ValueError:
            pass
    langs = sorted(by_lang, key=lambda lang: -sum(len(v) for v in by_lang[lang].values()))
    min_score = (cfg.get("language") or {}).get("min_score")
    for lang in langs[:8]:
        figures["language"].append(_hist_figure(f"language-ID probability · {lang}",
                                                histogram(by_lang[lang], min_score), min_score, "(fails if <)"))
    counts = Counter(r["lang"] for r in text)
    top = counts.most_common(25)
    if top:
        figures["language"].insert(0, _bar_figure("final text documents per language", [k for k, _ in top],
                                                  {"documents": [v for _, v in top]}))
    final = len(REACHES_QUALITY)  # the folder index of docs/text
    lengths = reached.labelled("text_chars", np.where(reached.folder == final, 0, -1), ["final documents"])
    if any(v for vs in lengths.values() for v in vs):
        figures["lengths"].append(_hist_figure("text characters per final document (log)",
                                               histogram(lengths, log=True), log=True))

    thresholds = _synthetic_thresholds(cfg)
    # the documents that reached the synthetic stage: all but the quality stage's drops
    synthetic = reached.stage == "synthetic"
    names = ["passed synthetic", *(f"dropped: {r}" for r in sorted({str(r) for r in reached.reason[synthetic]}))]
    code = {name: i for i, name in enumerate(names)}
    quality = REACHES_QUALITY.index("quality")
    labels = np.array([-1 if folder == quality else code[f"dropped: {r}"] if dropped else 0
                       for folder, dropped, r in zip(reached.folder, synthetic, reached.reason)], dtype=np.int64)
    for key in ("llm_generated", "poor_mt"):
        groups = reached.labelled(key, labels, names)
        if groups:
            figures["synthetic"].append(_hist_figure(f"synthetic · {key}", histogram(groups, thresholds.get(key)),
                                                     thresholds.get(key), "(fails if >=)"))

    vlm_min = (cfg.get("interleaved_vlm") or {}).get("min_score")
    rated = read_scores(root, ["docs/interleaved", "dropped/interleaved_vlm"], max_rows)
    vlm = rated.labelled("vlm", rated.folder, ["kept", "dropped: vlm_low_score"])
    if vlm:
        figures["vlm"].append(_hist_figure("VLM rating (1-5)", histogram(vlm, vlm_min), vlm_min, "(fails if <)"))

    for stage in ("exact_dedup", "near_dedup", "interleaved_exact_dedup", "interleaved_near_dedup",
                  "interleaved_dedup"):
        members = Counter(r["detail"] for r in _rows(root, f"dropped/{stage}", ["detail"], max_rows))
        if members:
            sizes = Counter(1 + n for n in members.values())
            xs = sorted(sizes)
            figures["dedup"].append(_bar_figure(f"{stage}: clusters by size (documents in the cluster)",
                                                [str(x) for x in xs], {"clusters": [sizes[x] for x in xs]}))

    for store in ("pairs", "interleaved"):
        images = _rows(root, f"images/{store}", ["width", "height", "format"], max_rows)
        if images:
            sides = {"shorter side": [min(r["width"], r["height"]) for r in images],
                     "longer side": [max(r["width"], r["height"]) for r in images]}
            figures["images"].append(_hist_figure(f"images/{store}: side lengths (px, log)", histogram(sides, log=True),
                                                  log=True))
            formats = Counter(r["format"] for r in images)
            figures["images"].append(_bar_figure(f"images/{store}: formats", list(formats),
                                                 {"images": list(formats.values())}))

    run_manifest = io.read_json(io.join(root, "shards", "manifest.json"))
    if run_manifest and run_manifest.get("phases"):
        phases = run_manifest["phases"]
        labels = sorted(phases)
        figures["packing"].append(_bar_figure("tokens per phase by modality", labels, {
            m: [phases[p]["tokens_by_modality"][m] for p in labels] for m in ("text", "pair", "interleaved")}))

    examples = {}
    for s in stages:
        if s["dropped"]:
            for reason, found in _examples(root, s["stage"], set(s["dropped"]), max_rows).items():
                examples[(s["stage"], reason)] = found
    image_counters = [[s["stage"], key, value] for s in stages for key, value in sorted(s.get("extra", {}).items())
                      if key.startswith("images/")]
    image_counters += [[s["stage"], f"dropped/{reason}", n] for s in stages for reason, n in sorted(s["dropped"].items())
                       if reason in ("image_exact_dup", "image_near_dup", "image_semantic_dup", "multimodal_duplicate")]
    paragraph_examples = {s["stage"]: io.read_json(io.join(root, s["stage"], "node_examples.json")) or {}
                          for s in stages if any(k.startswith("nodes/removed:") for k in s.get("extra", {}))}
    return {"summary": summary, "figures": dict(figures), "examples": dict(examples), "mix": run_manifest,
            "image_counters": image_counters, "paragraph_rules": _paragraph_rule_rows(summary, paragraph_examples),
            "kinds": _kind_rows(summary),
            "phases": {name: io.read_json(io.join(root, "shards", name, "manifest.json"))
                       for name in ((run_manifest or {}).get("phases") or {})},
            "max_rows": max_rows}


# -------------------------------------------------------------------------------------------- render
SECTIONS = [("funnel", "Funnel"), ("drops", "Drop reasons"), ("quality", "Quality rules: every value and its threshold"),
            ("language", "Languages"), ("lengths", "Lengths"), ("synthetic", "LLM text and poor machine translation"),
            ("vlm", "VLM scores"), ("dedup", "Dedup clusters"), ("images", "Images"), ("packing", "Packing")]


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _stage_rows(summary: dict) -> list[list]:
    return [[s["stage"], s["in"], s["out"], sum(s["dropped"].values()),
             ", ".join(f"{r}={n}" for r, n in sorted(s["dropped"].items(), key=lambda kv: -kv[1]))]
            for s in summary["stages"]]


LINE_STEPS = {  # counter name -> what the step removes (filters/clean.py, filters/template_lines.py)
    "template_lines": "lines on many pages of one host",
    "boilerplate_model_lines": "lines the boilerplate model calls boilerplate",
    "boilerplate_lines": "C4's policy and javascript lines",
    "label_lines": ("ad slot labels, photo credits, skip links, related/share/comment headings and what follows "
                    "a late one"),
    "link_list_lines": "lines that only list links",
    "rendering_copy_lines": "second to fourth copies of a sentence line, truncated copies",
}


def _line_step_rows(summary: dict) -> list[list]:
    """[stage, step, lines removed, documents changed, what] for every line step that removed a line
    (the `<step>/lines_removed` and `<step>/docs_changed` counters)."""
    rows = []
    for s in summary["stages"]:
        for key, n in sorted(s.get("extra", {}).items()):
            if key.endswith("/lines_removed"):
                step = key.removesuffix("/lines_removed")
                rows.append([s["stage"], step, n, s["extra"].get(f"{step}/docs_changed", 0), LINE_STEPS.get(step, "")])
    return rows


LINE_STEP_HEADER = ["stage", "line step", "lines removed", "documents changed", "what it removes"]


def _paragraph_rule_rows(summary: dict, examples: dict) -> list[list]:
    """[stage, kind, rule, paragraphs removed, documents changed, examples] from the paragraph rules'
    `nodes/removed:<kind>/<rule>` and `nodes/docs_changed:<kind>/<rule>` counters and their examples
    (OUT/<stage>/node_examples.json)."""
    rows = []
    for s in summary["stages"]:
        extra = s.get("extra", {})
        for key, n in sorted(extra.items()):
            if key.startswith("nodes/removed:"):
                kind, _, rule = key.removeprefix("nodes/removed:").partition("/")
                shown = " ¶ ".join(e["text"] for e in examples.get(s["stage"], {}).get(f"{kind}/{rule}", []))
                rows.append([s["stage"], kind, rule, n, extra.get(f"nodes/docs_changed:{kind}/{rule}", 0), shown])
    return rows


def _kind_rows(summary: dict) -> list[list]:
    """[stage, kind, documents in, kept, drop reasons] from the `kind:<kind>/...` counters of a stage that
    judges documents of several kinds (interleaved_text: web pages and PDFs)."""
    rows = []
    for s in summary["stages"]:
        extra = s.get("extra", {})
        for key, n in sorted(extra.items()):
            if key.startswith("kind:") and key.endswith("/in"):
                kind = key.removeprefix("kind:").removesuffix("/in")
                drops = {k.rpartition(":")[2]: v for k, v in extra.items() if k.startswith(f"kind:{kind}/dropped:")}
                rows.append([s["stage"], kind, n, n - sum(drops.values()),
                             ", ".join(f"{r}={v}" for r, v in sorted(drops.items(), key=lambda kv: (-kv[1], kv[0])))])
    return rows


KIND_HEADER = ["stage", "kind", "documents in", "kept", "drop reasons"]
PARAGRAPH_RULE_HEADER = ["stage", "kind", "paragraph rule", "paragraphs removed", "documents changed",
                         "examples (three, ¶ between)"]


def _skipped_models(summary: dict) -> list[str]:
    return sorted({f"{s['stage']}: {k} = {v}" for s in summary["stages"] for k, v in s.get("extra", {}).items()
                   if k.endswith("skipped_no_model") and v})


def _phase_rows(data: dict) -> list[list]:
    return [[name, m["status"], m["sequences"], m["tokens"], f"{m['padding_rate']:.3g}",
             m["tokens_by_modality"]["text"], m["tokens_by_modality"]["multimodal"], m.get("images", 0)]
            for name, m in sorted(data["phases"].items()) if m]


PHASE_HEADER = ["phase", "status", "sequences", "tokens", "padding rate", "text tokens", "multimodal tokens", "images"]


def render_html(data: dict) -> str:
    from plotly.offline import get_plotlyjs

    summary, parts, plots = data["summary"], [], []
    parts.append(f"<h1>curate run report</h1><p>output <code>{html.escape(summary['output'])}</code>, input "
                 f"{html.escape(', '.join(map(str, summary['input'])))} ({summary['input_files']} files), runner "
                 f"{html.escape(summary['runner'])}, {summary['workers']} worker(s), wall {summary.get('wall_s', '?')} s. "
                 f"Histograms read at most {data['max_rows']:,} rows per output folder.</p>")
    audit = summary.get("audit")
    if audit:
        parts.append(f"<p>Loss audit: {audit['rows']} rows from {audit['files']} files, each in exactly one output: "
                     f"<b>{'ok' if audit['ok'] else 'FAILED'}</b>.</p>")
    skipped = _skipped_models(summary)
    if skipped:
        parts.append("<p class=note>Not scored (no model configured): " + html.escape("; ".join(skipped)) + "</p>")
    steps = _line_step_rows(summary)
    for key, title in SECTIONS:
        figures = data["figures"].get(key) or []
        if key == "funnel":
            parts.append(f"<h2>{title}</h2>" + _table(["stage", "in", "out", "dropped", "drop reasons (all)"],
                                                    _stage_rows(summary)))
        elif key == "packing" and data["phases"]:
            mix = data["mix"] or {}
            ratio = mix.get("text_to_multimodal_ratio")
            parts.append(f"<h2>{title}</h2>" + _table(PHASE_HEADER, _phase_rows(data)) +
                         f"<p>text : multimodal tokens = {mix.get('tokens_by_modality', {}).get('text', 0):,} : "
                         f"{mix.get('tokens_by_modality', {}).get('multimodal', 0):,}"
                         f"{f' = {ratio:.4f} : 1' if ratio else ''} (target {mix.get('target_ratio')}, status "
                         f"{html.escape(str(mix.get('status')))}; epoch multipliers "
                         f"{html.escape(json.dumps(mix.get('epoch_multipliers')))}; "
                         f"{(mix.get('twins') or {}).get('text_replaced', 0)} text documents replaced by their "
                         f"multimodal twin)</p>")
        elif key == "quality" and (figures or steps or data["paragraph_rules"] or data["kinds"]):
            parts.append(f"<h2>{title}</h2>" + (f"<p>Lines removed before the rules judged the documents:</p>"
                                                 + _table(LINE_STEP_HEADER, steps) if steps else "")
                         + (f"<p>Document rules by kind of document:</p>" + _table(KIND_HEADER, data["kinds"])
                            if data["kinds"] else "")
                         + (f"<p>Paragraphs of interleaved documents removed before the document rules, by kind "
                            f"of document (filters/nodes.py):</p>" + _table(PARAGRAPH_RULE_HEADER, data["paragraph_rules"])
                            if data["paragraph_rules"] else ""))
        elif key == "images" and data["image_counters"]:
            parts.append(f"<h2>{title}</h2><p>Image counters (decoding, size rules, sha256 / pHash duplicates, "
                         f"frequent images):</p>" + _table(["stage", "counter", "value"], data["image_counters"]))
        elif figures:
            parts.append(f"<h2>{title}</h2>")
        for fig in figures:
            plots.append(fig)
            parts.append(f'<div class="plot" id="plot{len(plots) - 1}"></div>')
    parts.append("<h2>Examples of dropped documents</h2>")
    for (stage, reason), rows in sorted(data["examples"].items()):
        parts.append(f"<h3>{html.escape(stage)} · {html.escape(reason)}</h3>")
        for r in rows:
            text = (r.get("text") or "")[:EXAMPLE_CHARS]
            where = f"{r.get('warc_file')}@{r.get('warc_offset')}"
            parts.append(f'<div class="example"><a href="{html.escape(r.get("url") or "", quote=True)}">'
                         f'{html.escape(r.get("url") or "")}</a> <code>{html.escape(where)}</code> '
                         f'<i>{html.escape(r.get("detail") or "")}</i><pre>{html.escape(text)}</pre></div>')
    script = ("const FIGURES = " + json.dumps(plots).replace("</", "<\\/") + ";\n"
              "FIGURES.forEach((f, i) => Plotly.newPlot('plot' + i, f.data, f.layout, "
              "{displaylogo: false, responsive: true}));")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.plot{margin:1em 0}"
             "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px;font-size:12px}.note{color:#a60}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>curate report</title><style>{style}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>{''.join(parts)}<script>{script}</script></body></html>")


def render_markdown(data: dict) -> str:
    summary = data["summary"]
    lines = ["# curate run report", "", f"output `{summary['output']}`, {summary['input_files']} input files, "
             f"runner {summary['runner']}, {summary['workers']} worker(s), wall {summary.get('wall_s', '?')} s", "",
             "| stage | in | out | dropped | drop reasons |", "|---|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in _stage_rows(summary)]
    steps = _line_step_rows(summary)
    if steps:
        lines += ["", "| " + " | ".join(LINE_STEP_HEADER) + " |", "|---|---|---:|---:|---|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in steps]
    if data["kinds"]:
        lines += ["", "| " + " | ".join(KIND_HEADER) + " |", "|---|---|---:|---:|---|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in data["kinds"]]
    if data["paragraph_rules"]:
        lines += ["", "| " + " | ".join(PARAGRAPH_RULE_HEADER) + " |", "|---|---|---|---:|---:|---|"]
        lines += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"
                  for row in data["paragraph_rules"]]
    if data["phases"]:
        lines += ["", "| " + " | ".join(PHASE_HEADER) + " |", "|" + "---|" * len(PHASE_HEADER)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in _phase_rows(data)]
        mix = data["mix"] or {}
        lines += ["", f"text : multimodal = {mix.get('text_to_multimodal_ratio')} (target {mix.get('target_ratio')}, "
                      f"{mix.get('status')}), multipliers {json.dumps(mix.get('epoch_multipliers'))}"]
    for note in _skipped_models(summary):
        lines.append(f"- not scored (no model configured): {note}")
    return "\n".join(lines) + "\n"


def write_report(root: str, cfg: dict, max_rows: int = 100_000, summary: dict | None = None) -> tuple[str, str]:
    """OUT/report.html and OUT/report.md; returns their paths."""
    data = collect(root, cfg, max_rows, summary)
    paths = io.join(root, "report.html"), io.join(root, "report.md")
    for path, text in zip(paths, (render_html(data), render_markdown(data))):
        with FileSystems.create(path) as fh:
            fh.write(text.encode("utf-8"))
    return paths


def run_config(root: str) -> dict | None:
    """The config the run at `root` was made with (OUT/stats/config.json), if it saved one."""
    path = io.join(root, "stats", "config.json")
    return io.read_json(path) if FileSystems.exists(path) else None


