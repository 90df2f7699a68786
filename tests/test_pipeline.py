"""End-to-end Beam runs of the text branch on real fixtures: identities, determinism across worker
counts, resume, damaged input. These run real FnApiRunner pipelines (in-process and 2 processes)."""

import gzip
import io
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from extract.warc import iter_records
from filters.quality import QualityConfig
from pipelines.cli import main as cli_main
from pipelines.config import ConfigError, load_config
from pipelines.registry import STAGES
from pipelines.run import run
from tests.warc_factory import DATA, MINI, gz, html_page, real_members, response_record

TEXT_BRANCH = ["read", "extract", "language", "quality", "synthetic", "exact_dedup", "near_dedup", "crosslingual", "write"]

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
INPUTS = [str(MINI), str(DATA / "warc" / "whirlwind.warc.gz"), str(DATA / "warc" / "whirlwind.warc.wet.gz")]


def rows(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.parquet")):
        out += pq.read_table(path).to_pylist()
    return out


def labels():
    return [json.loads(line) for line in open(MINI.with_suffix("").with_suffix(".labels.jsonl"))]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One run of every stage (with its report), counting the Beam pipelines it runs and the WARC
    readers in their graphs: (output folder, summary, pipelines, readers)."""
    import apache_beam as beam
    from pipelines import stages as stage_module

    out = tmp_path_factory.mktemp("w1")
    pipelines, readers = [], []
    real_run, real_init = beam.Pipeline.run, stage_module.ReadWarcFile.__init__

    def counted_run(self, *args, **kwargs):
        pipelines.append(self)
        return real_run(self, *args, **kwargs)

    def counted_init(self, *args, **kwargs):
        readers.append(self)
        real_init(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(beam.Pipeline, "run", counted_run)
        patch.setattr(stage_module.ReadWarcFile, "__init__", counted_init)
        summary = run(load_config(TINY, input=INPUTS, output=str(out), workers=1, report=True))
    return out, summary, pipelines, readers


@pytest.fixture(scope="module")
def one_worker(first_run):
    return first_run[:2]


def test_identities_hold_for_every_stage(one_worker):
    out, summary = one_worker
    records = sum(1 for path in INPUTS for _ in iter_records(open(path, "rb")))
    stages = {s["stage"]: s for s in summary["stages"]}
    assert list(stages) == list(STAGES)  # every registered stage ran, in order
    assert stages["read"]["in"] == records == 132
    for name, s in stages.items():
        if name != "write":
            assert s["in"] == s["out"] + sum(s["dropped"].values()), name
    names = list(stages)
    text_branch = summary["stages"][:names.index("write") + 1]  # then the image branches, from the same read
    for a, b in zip(text_branch, text_branch[1:]):
        assert b["in"] == a["out"]
    # the shard stage mixes the final documents of every branch
    assert stages["pack"]["in"] == sum(stages[b]["out"] for b in ("write", "interleaved_write", "image_pairs"))
    pack = stages["pack"]["extra"]
    assert pack["tokenize/docs"] == stages["pack"]["out"] + stages["pack"]["dropped"].get("replaced_by_multimodal", 0)
    copies = sum(v for k, v in pack.items() if k.startswith("mix/") and k.endswith("/tokens"))  # every epoch copy
    assert pack["phase/pretrain/tokens"] + pack.get("phase/long/tokens", 0) + pack.get("phase/unused_tokens", 0) \
        == copies
    assert json.loads((out / "stats" / "summary.json").read_text()) == summary
    assert stages["read"]["extra"]["records/response"] == 42


def test_documents_and_drops_are_written_with_reasons(one_worker):
    out, summary = one_worker
    docs = rows(out / "docs" / "text")
    assert len(docs) == next(s for s in summary["stages"] if s["stage"] == "write")["out"] > 10
    assert all(d["text"] and d["lang"] and dict(d["scores"])["gopher_word_count"] > 0 for d in docs)
    assert all(dict(d["scores"])["crosslingual_languages"] >= 0 for d in docs)  # every kept document counted
    wet = [d for d in rows(out / "extract") if d["warc_file"].endswith("whirlwind.warc.wet.gz")]
    assert len(wet) == 1 and "Escopete" in wet[0]["text"]  # WET conversion text flows through extract
    dropped = rows(out / "dropped" / "quality") + rows(out / "dropped" / "language") + rows(out / "dropped" / "extract")
    by_label = {l["url"]: l["category"] for l in labels()}
    junk = [d for d in dropped if by_label.get(d["url"]) == "low_quality"]
    assert len(junk) == sum(1 for l in labels() if l["category"] == "low_quality")
    assert all(d["reason"] and d["stage"] for d in dropped)
    read_drops = Counter(d["reason"] for d in rows(out / "dropped" / "read"))
    assert read_drops["pdf_to_interleaved"] == 1 and read_drops["http_404"] + read_drops["http_301"] == 1
    assert read_drops["revisit"] == 1 and read_drops["empty_body"] == 1
    assert len(rows(out / "docs" / "pdf")) == 1


def test_exact_duplicates_name_their_survivor(one_worker):
    out, _ = one_worker
    kept = {d["id"]: d for d in rows(out / "docs" / "text")}
    dups = rows(out / "dropped" / "exact_dedup")
    assert len(dups) >= 2
    for d in dups:  # survivor = the first-crawled copy
        assert d["detail"] in kept and kept[d["detail"]]["warc_date"] <= d["warc_date"]
    by_url = {l["url"]: l for l in labels()}
    assert all(by_url[d["url"]]["category"] in ("exact_dup", "near_dup") for d in dups if d["url"] in by_url)


@pytest.mark.parametrize("spread", [True, False])
def test_two_workers_give_byte_identical_documents(one_worker, tmp_path, spread):
    """The text branch's documents and the shards, every branch run (the shards mix them all: a PDF of
    the inputs is an interleaved document), with the pages read reshuffled over the workers and
    processed where each file is read (the image branches and the multimodal shards have their own
    such tests: test_interleaved.py, test_images_beam.py, test_packing_multimodal.py)."""
    out1, _ = one_worker
    cfg = load_config(TINY, input=INPUTS, output=str(tmp_path), workers=2, stage_cost=spread)
    cfg.read.spread_records = spread
    summary = run(cfg)
    if spread:  # timed stages (Beam's state sampler on) change no byte, and every stage's cost is there
        cost = summary["cost"]
        assert list(cost["stages"]) == [s["stage"] for s in summary["stages"]]
        assert cost["pages"] == summary["stages"][0]["out"] > 0
        assert all(cost["stages"][name]["ms"] > 0 for name in ("extract", "quality", "interleaved"))
        total = sum(c["ms"] for c in cost["stages"].values()) + cost["outside_stages"]["ms"]
        assert cost["transforms_ms_per_page"] == round(total / cost["pages"], 3)
        assert cost["outside_stages"]["ms"] < total / 4  # only the loss audit is outside the stages
    else:
        assert "cost" not in summary
    outputs = ["docs/text", "shards"]
    files1 = sorted(p.relative_to(out1) for o in outputs for p in (out1 / o).rglob("*") if p.is_file())
    files2 = sorted(p.relative_to(tmp_path) for o in outputs for p in (tmp_path / o).rglob("*") if p.is_file())
    assert files1 == files2 and any(p.suffix == ".arrow" for p in files1)
    assert any(str(p).startswith("docs/text") for p in files1)
    for rel in files1:
        assert (out1 / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


def test_pages_are_spread_over_the_workers_only_where_a_file_would_hold_one_up():
    from pipelines.config import config_model
    from pipelines.stages import spread_records

    def cfg(sizes, workers=2, runner="FnApiRunner", beam_args=(), choice="auto"):
        return (config_model()(read={"spread_records": choice}, runner=runner, workers=workers,
                               beam_args=list(beam_args)), sizes)

    assert not spread_records(*cfg([10] * 12))                # 12 even files: each worker keeps 6
    assert spread_records(*cfg([80, 10, 10]))                 # one file holds 80% of the bytes: 1.6x a share
    assert not spread_records(*cfg([60, 20, 20]))             # 60 against 40: 1.2x an even share
    assert not spread_records(*cfg([59, 28, 16, 15, 6, 1]))   # dealt out: 65 and 60
    assert not spread_records(*cfg([80, 10, 10], workers=1))  # one worker: nothing to spread to
    assert spread_records(*cfg([100]))                        # one file: the other worker would idle
    assert spread_records(*cfg([10] * 4, workers=8))          # fewer files than workers
    assert not spread_records(*cfg([10] * 12, workers=8))     # 2 files against 1.5: 1.33x
    assert spread_records(*cfg([10] * 12, choice=True)) and not spread_records(*cfg([60, 20, 20], choice=False))
    # a distributed runner: the worker count its options give, the reshuffle where they give none
    assert not spread_records(*cfg([10] * 1000, runner="DataflowRunner", beam_args=["--max_num_workers=200"]))
    assert spread_records(*cfg([10] * 100, runner="DataflowRunner", beam_args=["--max_num_workers=200"]))
    assert spread_records(*cfg([10] * 1000, runner="FlinkRunner"))


def test_rerun_resumes_and_config_change_reruns_downstream(one_worker, tmp_path, capsys):
    import shutil

    out, first = one_worker
    again = run(load_config(TINY, input=INPUTS, output=str(out), workers=1))
    assert all(s["reused"] for s in again["stages"])
    shutil.copytree(out, tmp_path / "out")  # the fixture's output stays as it was, for other tests
    cfg = load_config(TINY, input=INPUTS, output=str(tmp_path / "out"), workers=1)
    cfg.quality = QualityConfig(c4=False)
    changed = run(cfg)
    reused = {s["stage"]: s["reused"] for s in changed["stages"]}
    assert reused == {"read": True, "extract": True, "language": False, "quality": False, "synthetic": False,
                      "exact_dedup": False, "near_dedup": False, "crosslingual": False, "write": False, "pack": False,
                      # the interleaved branch's text verdicts follow `quality`; the pairs recycle its drops
                      "interleaved": False, "interleaved_text": False, "interleaved_exact_dedup": False,
                      "interleaved_near_dedup": False, "interleaved_images": False, "interleaved_dedup": False,
                      "interleaved_vlm": False, "interleaved_write": False, "image_pairs": False}
    assert "c4_too_few_sentences" not in changed["stages"][3]["dropped"]
    capsys.readouterr()
    assert cli_main(["stats", str(out)]) == 0
    table = capsys.readouterr().out
    assert "exact_dedup" in table and "quality" in table


def test_a_run_is_one_pipeline_that_reads_each_file_once(first_run):
    """Every group runs in one Beam pipeline, and the text and image branches share one read of the
    input: one pipeline run, one WARC reader in its graph; the report is written at the end."""
    out, summary, pipelines, readers = first_run
    assert len(pipelines) == 1 and len(readers) == 1
    assert summary["report"] == str(out / "report.html") and (out / "report.md").exists()
    assert [s["stage"] for s in summary["stages"]] == list(STAGES) and summary["audit"]["ok"]
    for s in summary["stages"]:  # each group's marker was written inside the pipeline, when it was done
        marker = json.loads((out / s["stage"] / "_SUCCESS").read_text())
        assert 0 < marker["stats"]["done_s"] <= summary["wall_s"]


def test_the_line_steps_counters_add_up_the_documents_scores_and_the_report_lists_them(one_worker):
    """The quality stage counts each line step (lines removed, documents changed) as the documents'
    scores record it, over every document that reached the stage (final, or dropped at or after it);
    report.md's line-step table shows those counters."""
    from pipelines.report import REACHES_QUALITY, run_config, write_report

    out, summary = one_worker
    extra = next(s for s in summary["stages"] if s["stage"] == "quality")["extra"]
    reached = rows(out / "docs" / "text") + [r for stage in REACHES_QUALITY for r in rows(out / "dropped" / stage)]
    removed, changed = Counter(), Counter()
    for row in reached:
        for key, n in dict(row["scores"] or ()).items():
            if key in ("boilerplate_lines", "label_lines", "link_list_lines", "rendering_copy_lines", "boilerplate_model_lines") and n:
                removed[key] += int(n)
                changed[key] += 1
    assert removed and {k: extra[f"{k}/lines_removed"] for k in removed} == dict(removed)
    assert {k: extra[f"{k}/docs_changed"] for k in changed} == dict(changed)
    markdown = Path(write_report(str(out), run_config(str(out)))[1]).read_text()
    for key in removed:
        assert f"| quality | {key} | {removed[key]} | {changed[key]} |" in markdown


def test_a_run_killed_after_a_group_resumes_byte_identical(one_worker, tmp_path):
    """Markers of the groups after read+extract gone (a run killed once read+extract had finished):
    the rerun reads extract's Parquet output back, runs the rest, and every deterministic output
    has the bytes of the uninterrupted run (documents passed on in the pipeline and documents read
    back from Parquet give the same results)."""
    import shutil

    out1, _ = one_worker
    out2 = tmp_path / "out"
    shutil.copytree(out1, out2)
    later = [name for name in STAGES if name not in ("read", "extract")]
    for name in later:
        (out2 / name / "_SUCCESS").unlink()
    summary = run(load_config(TINY, input=INPUTS, output=str(out2), workers=1), echo=False)
    assert {s["stage"]: s["reused"] for s in summary["stages"]} == {n: n in ("read", "extract") for n in STAGES}
    outputs = ["docs/text", "docs/pairs", "images", "shards"]
    files = sorted(p.relative_to(out1) for o in outputs for p in (out1 / o).rglob("*") if p.is_file())
    assert any(p.suffix == ".arrow" for p in files) and any(str(p).startswith("docs/text") for p in files)
    assert files == sorted(p.relative_to(out2) for o in outputs for p in (out2 / o).rglob("*") if p.is_file())
    for rel in files:
        assert (out1 / rel).read_bytes() == (out2 / rel).read_bytes(), rel


def test_selected_stages_run_without_branches_they_do_not_need(tmp_path):
    """The image branches selected on a fresh folder run without the text branch (they read the input
    themselves); `--stages image_pairs` alone and `--stages pack` cannot run: the interleaved stages
    whose dropped documents the pairs recycle, and the groups pack reads from, have no output."""
    from pipelines.config import UserError

    cfg = load_config(TINY, input=[str(MINI)], output=str(tmp_path), workers=1)
    with pytest.raises(UserError, match="stages interleaved\\+.* have no finished output"):
        run(cfg, stages=["image_pairs"], echo=False)
    images = [n for n in STAGES if n.startswith("interleaved")] + ["image_pairs"]
    summary = run(cfg, stages=images, echo=False)
    assert [s["stage"] for s in summary["stages"]] == images and "audit" not in summary
    assert not (tmp_path / "read" / "_SUCCESS").exists() and (tmp_path / "image_pairs" / "_SUCCESS").exists()
    with pytest.raises(UserError, match="stages read\\+extract have no finished output"):
        run(cfg, stages=["pack"], echo=False)


def test_damaged_input_completes_with_reasons(tmp_path):
    members = real_members()
    is_response = [b"WARC-Type: response" in gzip.decompress(m)[:600] for m in members]
    victim = next(i for i in range(20, len(members)) if is_response[i])
    big = response_record("http://big.test/", html_page(["x" * 1000] * 50_000))  # ~50 MB body
    gbk = response_record("http://gbk.test/", html_page(["因参加投票的选民人数未达到法律规定的比例，这次公决结果无效。" * 20])
                          .decode().encode("gbk"))
    damaged = b"".join([
        *members[:victim],
        members[victim][: len(members[victim]) // 2],              # truncated gzip member
        gz(b"WARC/1.1\r\nnot a header at all\r\n\r\n"),           # corrupt WARC header
        os.urandom(4096).replace(b"\x1f\x8b", b"zz"),               # random bytes
        gz(big),                                                    # 50 MB HTML body
        gz(gbk),                                                    # wrong charset declared
        gz(response_record("http://empty.test/", b"")),             # empty body
        *members[victim + 1:],
    ])
    path = tmp_path / "damaged.warc.gz"
    path.write_bytes(damaged)
    cfg = load_config(TINY, input=[str(path)], output=str(tmp_path / "out"), workers=1)
    summary = run(cfg.model_copy(update={"stages": TEXT_BRANCH}))  # the reader's damage; the image branches' is fuzzed
    read, extract = summary["stages"][0], summary["stages"][1]
    assert read["dropped"]["corrupt_gzip_member"] == 1
    assert read["dropped"]["bad_warc_header"] == 1
    assert read["dropped"]["not_gzip_data"] == 1
    assert read["dropped"]["empty_body"] == 2  # the fixture's own empty page and ours
    assert extract["dropped"]["html_too_large"] == 1
    assert extract["extra"]["charset/detected"] >= 1
    # every intact record was read: the fixture's responses minus the truncated one, plus our 3 good ones
    assert read["extra"]["records/response"] == sum(is_response) - 1 + 3
    texts = [d["text"] for d in rows(tmp_path / "out" / "extract")]
    assert any("公决结果无效" in t for t in texts)


def test_unknown_config_key_is_rejected(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("qualty: {}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: qualty: unknown key; did you mean quality\?"):
        load_config(str(cfg))


def test_a_config_extends_its_base(tmp_path):
    (tmp_path / "base.yaml").write_text("workers: 3\nwrite: {shards: 7}\nsynthetic: {max_chars: 900}\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nsynthetic: {poor_mt_threshold: 0.99}\n")
    cfg = load_config(str(tmp_path / "child.yaml"))
    assert cfg.workers == 3 and cfg.write.shards == 7
    assert cfg.synthetic.max_chars == 900 and cfg.synthetic.poor_mt_threshold == 0.99
    (tmp_path / "base.yaml").write_text("base: child.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(str(tmp_path / "child.yaml"))
    local = load_config(str(ROOT / "configs" / "local.yaml"))
    for name in ("local_lm", "local_lm_smollm2"):  # local.yaml + an LM head
        lm = load_config(str(ROOT / "configs" / f"{name}.yaml"))
        assert lm.model_dump(exclude={"synthetic"}) == local.model_dump(exclude={"synthetic"})
        assert lm.synthetic.lm_logit and lm.synthetic.llm_generated_threshold


@pytest.mark.parametrize("name", ["local", "tiny", "dataflow", "flink", "spark"])
def test_shipped_configs_load(name):
    cfg = load_config(str(ROOT / "configs" / f"{name}.yaml"))
    assert cfg.input and cfg.output
    if name in ("dataflow", "flink", "spark"):
        from pipelines.run import pipeline_options

        opts = pipeline_options(cfg).get_all_options()
        assert opts["runner"] == cfg.runner


def test_score_command_adds_every_score(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "The committee met on Tuesday to discuss the budget. "
                                       "Members agreed to postpone the vote until next month."}) + "\n"
                   + json.dumps({"id": 7}) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli_main(["score", "--input", str(src), "--output", str(out)]) == 0
    first, second = [json.loads(line) for line in out.read_text().splitlines()]
    assert first["lang"] == "en" and 0 <= first["llm_generated"] <= 1 and 0 <= first["poor_mt"] <= 1
    assert first["quality"]["gopher_word_count"] == 18 and "gopher_too_few_words" in first["quality_failed"]
    assert second == {"id": 7, "error": "no text field"}


def test_document_step_tallies_one_fate_per_document():
    """A per-document step reports in / out / dropped/<reason> and its own counters once per bundle,
    from what it returned: one fate per document, a Drop written as a drop row of the stage."""
    import apache_beam as beam

    from pipelines.run import StageInvariantError, check_identity
    from pipelines.stage import COUNTERS, DROPPED, Drop, DocumentStep

    class KeepEven(DocumentStep):
        def step(self, doc):
            self.count("seen")
            return Drop("odd", f"n={doc['n']}") if doc["n"] % 2 else doc

    def tally(step, docs):
        step.start_bundle()
        emitted = [o for d in docs for o in step.process(d)]
        final = [o.value.value for o in step.finish_bundle()]
        assert all(getattr(o, "tag", None) != COUNTERS for o in emitted)  # counters only at bundle end
        stats = {"in": 0, "out": 0, "dropped": {}}
        for key, n in final:
            if key in ("in", "out"):
                stats[key] = n
            elif key.startswith("dropped/"):
                stats["dropped"][key[8:]] = n
        return emitted, dict(final), stats

    docs = [{"id": str(i), "n": i, "text": "x", "scores": {"n": float(i)}} for i in range(5)]
    emitted, final, stats = tally(KeepEven("toy", {}), docs)
    assert len([o for o in emitted if isinstance(o, dict)]) == 3
    drops = [o.value for o in emitted if isinstance(o, beam.pvalue.TaggedOutput)]
    assert all(o_tag == DROPPED for o_tag in [o.tag for o in emitted if isinstance(o, beam.pvalue.TaggedOutput)])
    assert [(d["id"], d["stage"], d["reason"], d["detail"], d["scores"]) for d in drops] == [
        ("1", "toy", "odd", "n=1", {"n": 1.0}), ("3", "toy", "odd", "n=3", {"n": 3.0})]
    assert final == {"in": 5, "out": 3, "dropped/odd": 2, "seen": 5}
    check_identity("keep_even", stats)
    with pytest.raises(StageInvariantError):
        check_identity("lossy", {**stats, "out": 2})


def test_batched_document_step_emits_the_same_documents_and_tallies():
    """With `batch` > 1 documents are stepped in groups; what comes out (in order, kept and dropped)
    and the tallies are those of stepping one by one; the rest is flushed in finish_bundle."""
    import apache_beam as beam
    from apache_beam.utils.windowed_value import WindowedValue

    from pipelines.stage import Drop, DocumentStep

    class KeepEven(DocumentStep):
        def step(self, doc):
            return Drop("odd") if doc["n"] % 2 else doc

    def run(batch):
        step = KeepEven("toy", {})
        step.batch = batch
        step.start_bundle()
        during = [o for n in range(7) for o in step.process({"id": str(n), "n": n, "text": "x"})]
        after = list(step.finish_bundle())
        unwrap = []
        for o in during + after:
            if isinstance(o, beam.pvalue.TaggedOutput):
                value = o.value.value if isinstance(o.value, WindowedValue) else o.value
                unwrap.append((o.tag, value if o.tag == "counters" else value["id"]))
            else:
                unwrap.append(("docs", (o.value if isinstance(o, WindowedValue) else o)["id"]))
        documents = [u for u in unwrap if u[0] != "counters"]  # in emission order
        return len(during), documents, sorted(u[1] for u in unwrap if u[0] == "counters")

    one_by_one, batched = run(1), run(3)
    assert batched[1:] == one_by_one[1:]
    assert one_by_one[2] == [("dropped/odd", 3), ("in", 7), ("out", 4)]
    assert one_by_one[0] == 7 and batched[0] == 6  # the 7th document waits for finish_bundle


def test_a_batch_is_stepped_whole_before_its_documents_go_on():
    """A batch's documents are all stepped before the first goes to the steps fused after this one (which
    would otherwise run between them and push this step's tables out of the CPU caches)."""
    from pipelines.stage import DocumentStep

    events = []

    class Log(DocumentStep):
        def step(self, doc):
            events.append(("step", doc["n"]))
            return doc

    step = Log("toy", {})
    step.batch = 3
    step.start_bundle()
    for n in range(3):
        for out in step.process({"id": str(n), "n": n, "text": "x"}):
            events.append(("next step", out["n"]))
    assert events == [("step", 0), ("step", 1), ("step", 2), ("next step", 0), ("next step", 1), ("next step", 2)]


CHROMIUM = "/usr/bin/chromium"  # Debian's chromium; the Makefile's `browser` target installs it


def test_the_report_renders_every_plot_in_a_real_browser(one_worker):
    """OUT/report.html in headless Chromium (Playwright driving Debian's chromium): it loads from the file
    alone, draws every plot, logs no console error, and its screenshot is not blank; report.md holds
    the funnel with every drop reason."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    from pipelines.report import run_config, write_report

    out, summary = one_worker
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: `make browser` installs Debian's chromium"
    html_path, md_path = write_report(str(out), run_config(str(out)))
    assert "<script src=" not in Path(html_path).read_text()  # plotly.js is inlined; any fetch is aborted below
    markdown = Path(md_path).read_text()
    for s in summary["stages"]:
        assert f"| {s['stage']} | {s['in']} | {s['out']} |" in markdown
        assert all(f"{reason}={n}" in markdown for reason, n in s["dropped"].items())
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_())
        page.goto(f"file://{html_path}")
        page.wait_for_function("[...document.querySelectorAll('.plot')].every(d => d.querySelector('.main-svg'))",
                               timeout=60_000)
        plots = page.evaluate("document.querySelectorAll('.plot').length")
        drawn = page.evaluate("[...document.querySelectorAll('.plot')].filter("
                              "d => d.querySelectorAll('.bars path, .point').length > 0).length")
        shot = page.screenshot(full_page=False)
        browser.close()
    pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("L"))
    assert plots >= 20 and drawn == plots and errors == []
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.01  # text and bars, not a blank page


def test_beam_overhead_fixes_give_beam_s_answers(first_run):
    """pipelines/beam_overhead.py: over every ParDo of a whole run's graph, the memoised argument lists,
    state/timer specs and yield-and-return checks equal what Beam computes without the memo; an options view is shared and
    sees writes made through another view."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import DebugOptions, StandardOptions
    from apache_beam.runners.common import MethodWrapper
    from apache_beam.transforms import core, userstate

    from pipelines import beam_overhead

    _, _, pipelines, _ = first_run
    dofns = []

    class Collect(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if isinstance(node.transform, beam.ParDo):
                dofns.append(node.transform.fn)

    pipelines[0].visit(Collect())
    assert len(dofns) > 500 and core.get_function_args_defaults is beam_overhead._ARGS_DEFAULTS  # Beam's after the run

    def answers():
        out = []
        for fn in dofns:
            methods = sorted(n for n in dir(fn) if callable(getattr(fn, n, None)) and not n.startswith("__"))
            wrapped = [(n, MethodWrapper(fn, n).args, MethodWrapper(fn, n).defaults) for n in methods
                       if isinstance(getattr(fn, n), type(fn.process))]
            out.append((type(fn).__name__, wrapped, userstate.get_dofn_specs(fn),
                        core._check_fn_use_yield_and_return(fn.process)))
        return out

    with beam_overhead.local_run():
        assert core.get_function_args_defaults is beam_overhead.function_args_defaults
        memoised = answers()
    assert userstate.get_dofn_specs is beam_overhead._DOFN_SPECS and answers() == memoised
    # A stateful DoFn's specs, through the class's fixed methods, and through a Map's wrapped callable.
    bag = userstate.BagStateSpec("bag", beam.coders.StrUtf8Coder())

    class Stateful(beam.DoFn):
        def process(self, element, state=beam.DoFn.StateParam(bag)):
            yield element

    def stateful_map(element, state=beam.DoFn.StateParam(bag)):
        return element

    for fn in (Stateful(), Stateful(), beam.Map(stateful_map).fn, beam.Map(len).fn):
        assert beam_overhead.dofn_specs(fn) == beam_overhead._DOFN_SPECS(fn)
    assert beam_overhead.dofn_specs(Stateful()) == ({bag}, set())
    options = pipelines[0].options
    with beam_overhead.local_run():
        view = options.view_as(StandardOptions)
        assert options.view_as(StandardOptions) is view and view.runner == "FnApiRunner"
        options.view_as(DebugOptions).experiments = ["memo_check"]
    assert options.view_as(DebugOptions).experiments == ["memo_check"]


def test_extract_command_gives_each_page_the_text_the_quality_rules_get(one_worker, tmp_path, capsys):
    """`curate extract` over the run's inputs and an .html.gz file: every page the text branch kept or
    dropped at quality or later has that text (the quality stage's rows hold the text its rules
    judged), every page dropped before has that reason, one line per page record."""
    out, _ = one_worker
    html = tmp_path / "page.html.gz"
    html.write_bytes(gzip.compress((DATA / "interleaved" / "qa-personal-names.en.html").read_bytes()))
    lines_file = tmp_path / "pages.jsonl"
    assert cli_main(["extract", "--input", *INPUTS, str(html), "--output", str(lines_file), "--config", TINY]) == 0
    assert f"-> {lines_file}" in capsys.readouterr().out
    lines = [json.loads(line) for line in lines_file.read_text().splitlines()]
    page = lines.pop()
    assert page["path"] == str(html) and page["reason"] is None and len(page["text"]) > 200
    got = Counter((line["url"], line["text"], line["reason"]) for line in lines if line["url"] is not None)
    judged = rows(out / "docs" / "text") + [r for s in ("quality", "synthetic", "exact_dedup", "near_dedup")
                                            for r in rows(out / "dropped" / s)]
    expected = Counter((r["url"], r["text"], None) for r in judged)
    expected.update((r["url"], None, r["reason"]) for s in ("read", "extract", "language")
                    for r in rows(out / "dropped" / s) if r["url"])
    assert got == expected
    assert sum(1 for _, text, _ in expected.elements() if text) > 30 and len(expected) > 40
    assert Counter(line["reason"] for line in lines if line["url"] is None) == Counter(
        r["reason"] for r in rows(out / "dropped" / "read") if not r["url"])
