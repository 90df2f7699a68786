"""The typed run config and the stage contract: every section validated before any pipeline, the
documented reference config listing exactly the model's keys, a stage registered at run time counted,
dropped and written like the built-in ones, and docs/stages.md generated from the code."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from pipelines.config import ConfigError, RunSettings, config_model, load_config
from pipelines.describe import BEGIN, END, stage_reference
from pipelines.stage import Drop, DocumentStage, DocumentStep, register, unregister
from pipelines.registry import STAGES

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= _leaf_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _yaml_keys(data: dict, model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, value in data.items():
        field = model.model_fields.get(name)
        nested = field is not None and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        keys |= _yaml_keys(value, field.annotation, f"{prefix}{name}.") if nested and isinstance(value, dict) \
            else {prefix + name}
    return keys


def test_local_yaml_lists_exactly_the_models_keys():
    """configs/local.yaml is the documented reference: every key of every section, and nothing else."""
    data = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    model = config_model()
    assert _yaml_keys(data, model) == _leaf_keys(model)


@pytest.mark.parametrize("section", [s for s in STAGES if STAGES[s].config.model_fields])
def test_a_typo_in_any_section_names_file_key_and_fix(section, tmp_path):
    first = next(iter(STAGES[section].config.model_fields))
    typo = first[:-2] + first[-1] + first[-2]  # two letters swapped
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump({section: {typo: 1}}))
    with pytest.raises(ConfigError) as err:
        load_config(str(bad))
    assert str(err.value) == f"{bad}: {section}.{typo}: unknown key; did you mean {first}?"


@pytest.mark.parametrize("override, message", [
    ({"workers": 0}, "workers: Input should be greater than or equal to 1 (got 0)"),
    ({"write_dropped": "yes"}, "write_dropped: Input should be a valid boolean (got 'yes')"),
    ({"extract": {"engine": "bs4"}}, "extract.engine: Input should be 'resiliparse' or 'trafilatura' (got 'bs4')"),
    ({"language": {"min_score": 1.5}}, "language.min_score: Input should be less than or equal to 1 (got 1.5)"),
    ({"pack": {"phases": {"short": {"seq_len": 128}}}}, "pack.phases.short.share: Field required"),
    ({"image_pairs": {"phash": {"key_bands": 4}}}, "image_pairs.phash: key_bands > bands - threshold loses pairs"),
    ({"near_dedup": {"survivor": "latest"}}, "near_dedup.survivor: Input should be 'earliest_capture' or"),
    ({"stages": ["read", "bogus"]}, "stages: unknown stages ['bogus']"),
])
def test_types_ranges_and_enums_are_checked_with_the_key_path(override, message):
    with pytest.raises(ConfigError, match="^" + re.escape(f"{TINY}: {message}")):
        load_config(TINY, **override)


def test_a_new_phase_may_be_configured():
    cfg = load_config(TINY, pack={"phases": {"short": {"seq_len": 128, "share": 1}}})
    assert cfg.pack.phases["short"].seq_len == 128 and "pretrain" in cfg.pack.phases


def test_curate_run_with_a_typo_fails_fast_before_any_pipeline(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text(f"base: {TINY}\noutput: {tmp_path / 'out'}\nquality: {{gopher_min_doc_wrods: 10}}\n")
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--config", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    elapsed = time.time() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"curate: {bad}: quality.gopher_min_doc_wrods: unknown key; did you mean gopher_min_doc_words?")
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
    assert elapsed < 5 * 3, elapsed  # under 5 s on an idle machine; the suite runs two processes at once


# ---------------------------------------------------------------------------------- a stage added at run time
class ShoutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_exclamations: int = Field(0, ge=0, description="documents with more '!' than this are dropped")


class Shout(DocumentStep):
    def step(self, doc):
        n = doc["text"].count("!")
        if n > self.cfg.max_exclamations:
            return Drop("exclamations", f"{n} > {self.cfg.max_exclamations}")
        return {**doc, "text": doc["text"].upper()}


class ShoutStage(DocumentStage):
    """Upper-cases every document; drops those that exclaim."""

    name, config, step, reasons = "shout", ShoutConfig, Shout, ("exclamations",)


@pytest.fixture
def shout():
    register(ShoutStage, after="quality")
    yield
    unregister("shout")


def test_a_stage_registered_at_run_time_is_configured_counted_dropped_and_written(shout, tmp_path):
    """The whole of adding a stage: the class above and one `register` line. The runner, the config,
    the stats, OUT/dropped and the loss audit take it up without naming it."""
    from pipelines.run import run

    assert list(STAGES).index("shout") == list(STAGES).index("quality") + 1
    with pytest.raises(ConfigError, match=r"shout\.max_exclamation: unknown key; did you mean max_exclamations\?"):
        load_config(TINY, shout={"max_exclamation": 1})
    text_branch = [s for s in STAGES if s not in ("pack", "image_pairs")]
    cfg = load_config(TINY, output=str(tmp_path / "out"), stages=text_branch, shout={"max_exclamations": 2})
    summary = run(cfg, echo=False)
    stats = {s["stage"]: s for s in summary["stages"]}
    assert stats["shout"]["in"] == stats["quality"]["out"] and stats["synthetic"]["in"] == stats["shout"]["out"]
    assert stats["shout"]["in"] == stats["shout"]["out"] + stats["shout"]["dropped"]["exclamations"]
    dropped = pq.read_table(tmp_path / "out" / "dropped" / "shout").to_pylist()
    assert len(dropped) == stats["shout"]["dropped"]["exclamations"] > 0
    assert all(d["stage"] == "shout" and d["text"].count("!") > 2 for d in dropped)
    kept = pq.read_table(tmp_path / "out" / "docs" / "text").to_pylist()
    assert kept and all(d["text"] == d["text"].upper() for d in kept)
    assert summary["audit"]["ok"] and "shout" in summary["audit"]["stages"]


# ------------------------------------------------------------------------------------------------- outputs
def test_scores_are_a_parquet_map(tmp_path):
    """`SELECT scores['gopher_word_count'] ...` in DuckDB; here the same lookup with pyarrow."""
    from pipelines.run import run

    cfg = load_config(TINY, output=str(tmp_path / "out"),
                      stages=["read", "extract", "language", "quality"])
    run(cfg, echo=False)
    table = pq.read_table([str(f) for f in sorted((tmp_path / "out" / "quality").glob("*.parquet"))])
    words = pc.map_lookup(table["scores"], "gopher_word_count", "first").to_pylist()
    assert words and all(isinstance(w, float) and w > 0 for w in words)


def test_stage_reference_is_generated_from_the_code():
    readme = (ROOT / "docs" / "stages.md").read_text()
    block = readme[readme.index(BEGIN) + len(BEGIN):readme.index(END)].strip("\n") + "\n"
    assert block == stage_reference(), "docs/stages.md is stale: paste `curate stages` between the markers"


def test_curate_stages_prints_every_stage_reason_and_key():
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "stages"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, stage in STAGES.items():
        assert f"### {name}\n" in proc.stdout
        assert all(f"`{r}`" in proc.stdout for r in stage.reasons)
    for key in RunSettings.model_fields:
        assert f"| `{key}` |" in proc.stdout


def test_auto_workers_take_one_per_32_mib_of_input_and_at_most_one_per_core(monkeypatch):
    import os

    from pipelines.run import AUTO_BYTES_PER_WORKER, local_workers

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert local_workers("auto", 9 << 20) == 1 and local_workers("auto", 0) == 1
    assert local_workers("auto", 2 * AUTO_BYTES_PER_WORKER) == 2 and local_workers("auto", 10 << 30) == 2
    assert local_workers(3, 0) == 3
    assert load_config(None, workers="auto").workers == "auto"
    with pytest.raises(ConfigError, match="workers"):
        load_config(None, workers="many")


def test_the_code_digest_follows_sources_and_models_not_their_documentation(tmp_path, monkeypatch):
    """A stage's fingerprint covers the code: a source file, a C extension's source or a shipped model
    changed gives another digest (a finished stage is not reused by other code), the model card does not."""
    from pipelines.config import code_digest, stage_fingerprint

    (tmp_path / "extract").mkdir()
    (tmp_path / "filters" / "models").mkdir(parents=True)
    files = {"extract/html.py": "A = 1\n", "filters/_words.c": "int a;\n", "filters/models/lid.ftz": "model",
             "filters/models/MODEL_CARD.md": "card"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    digests = {code_digest(tmp_path)}
    for name, changes in (("extract/html.py", True), ("filters/_words.c", True), ("filters/models/lid.ftz", True),
                          ("filters/models/MODEL_CARD.md", False)):
        (tmp_path / name).write_text(files[name] + "changed\n")
        code_digest.cache_clear()
        digest = code_digest(tmp_path)
        assert (digest not in digests) == changes, name
        digests.add(digest)
    cfg = load_config(None)
    fingerprint = stage_fingerprint(cfg, "quality", "abc")
    monkeypatch.setattr("pipelines.config.code_digest", lambda: "another version")
    assert stage_fingerprint(cfg, "quality", "abc") != fingerprint
