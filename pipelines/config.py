"""The run configuration: one typed model, validated entirely by `load_config` before any pipeline is built.

The model is the run's top-level settings (`RunSettings`) plus one section per registered stage, each the
stage's own pydantic model (pipelines/stage.py), so a stage added to the registry brings its section with
it. A YAML file may name a `base:` file it extends; keyword overrides (the CLI's) come last. The runner
and the stages read the validated model itself (`cfg.read.spread_records`), each stage's DoFns their own
section's model; what the runner decides at run time (the matched input files, the stages built) is no
config key but a `stage.RunPlan`.

Why pydantic rather than dataclasses: the sections nest (image_pairs.fetch, pack.phases.<name>), and
pydantic validates nested types, ranges and enumerations in one pass, reports every error with its key
path, refuses unknown keys (`extra="forbid"`), and gives each field a description that `curate stages`
prints, where dataclasses would need all of that written by hand. It is pinned in pyproject.toml.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import typing
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, create_model, field_validator

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GLOB = str(REPO_ROOT / "sample" / "*.warc.gz")
LOCAL_CONFIG = REPO_ROOT / "configs" / "local.yaml"


class UserError(ValueError):
    """Something the user gave that cannot be used (a config, an input path, a folder): the CLI prints
    it as one line and exits 2; anything else is an internal error (a traceback, exit 1)."""


class ConfigError(UserError):
    """A run configuration that cannot run, named by file and key path."""


class RunSettings(BaseModel):
    """The run's top-level settings; a field per registered stage is added by `config_model`."""

    model_config = ConfigDict(extra="forbid")

    input: list[str] = Field([SAMPLE_GLOB], min_length=1, description=(
        "WARC/WET paths or globs (local, gs://, s3://); default: the bundled real sample"))
    output: str = Field("out/sample", description="output folder: one folder per stage, stats, final outputs")
    runner: str = Field("FnApiRunner", description=(
        "Beam runner; FnApiRunner or DirectRunner run locally (Beam's default would download Prism)"))
    workers: typing.Annotated[int, Field(ge=1)] | typing.Literal["auto"] = Field("auto", description=(
        "local worker processes (> 1: direct_running_mode=multi_processing); auto = one per 32 MiB of input, "
        "at most one per core (a second local worker costs more than it gives below that)"))
    beam_args: list[str] = Field([], description='extra Beam pipeline options, e.g. ["--direct_num_workers=4"]')
    write_dropped: StrictBool = Field(True, description="every dropped document under OUT/dropped/<stage>/")
    report: StrictBool = Field(True, description="write OUT/report.html and OUT/report.md when the run ends "
                                                 "(pipelines/report.py; also `curate report OUT`)")
    stage_cost: StrictBool = Field(False, description=(
        "time each stage (Beam's per-transform msecs) into stats/summary.json's cost, ms per page; locally this "
        "runs Beam's state-sampling thread, which a run otherwise skips (about 2 ms per bundle)"))
    stages: list[str] | None = Field(None, description="the stages to run, in the registry's order; null = all")

    @field_validator("input", mode="before")
    @classmethod
    def _one_pattern(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("stages")
    @classmethod
    def _registered(cls, value):
        from pipelines.registry import STAGES

        unknown = [s for s in value or () if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stages {unknown}; known: {list(STAGES)}")
        return value


def config_model() -> type[BaseModel]:
    """RunSettings plus a section per registered stage (rebuilt when the registry changes)."""
    from pipelines.registry import STAGES

    return _model(tuple((name, stage.config) for name, stage in STAGES.items()))


@lru_cache(maxsize=8)
def _model(sections: tuple) -> type[BaseModel]:
    fields = {name: (section, Field(default_factory=section)) for name, section in sections}
    return create_model("RunConfig", __base__=RunSettings, **fields)


def default_config() -> BaseModel:
    """Every key at its built-in default (no config file read)."""
    return config_model()()


def _read_yaml(path: str, seen: tuple = ()) -> dict:
    """A config file's settings over those of its `base:` file (a path relative to it), if it names one."""
    path = os.path.realpath(path)
    if path in seen:
        raise ConfigError(f"config bases form a cycle: {' -> '.join(seen + (path,))}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    return _merge(_read_yaml(str(Path(path).parent / base), seen + (path,)), data)


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def load_config(path: str | None = None, **overrides) -> BaseModel:
    """The validated run config (a `config_model()` instance), every default filled in: defaults <- the YAML file
    (configs/local.yaml when none is given) <- non-None keyword overrides. Raises ConfigError naming
    the file and the key path of every problem."""
    if path is None and LOCAL_CONFIG.exists():
        path = str(LOCAL_CONFIG)
    data = _read_yaml(path) if path else {}
    data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
    model = config_model()
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe_errors(err, model, path or "config")) from None


def describe_errors(err: ValidationError, model: type[BaseModel], where: str) -> str:
    """One line per wrong key: `file: section.key: what is wrong`, with a suggestion for a misspelt key."""
    lines: dict[str, str] = {}
    for e in err.errors():
        path, at = _key_path(model, list(e["loc"]))
        if e["type"] == "extra_forbidden":
            known = list(at.model_fields) if at else []
            path.append(str(e["loc"][-1]))
            close = difflib.get_close_matches(path[-1], known, n=1)
            problem = f"unknown key; did you mean {close[0]}?" if close else f"unknown key; known: {', '.join(known)}"
        else:
            got = e.get("input")
            shown = "" if isinstance(got, dict) or e["type"] == "missing" else f" (got {got!r})"
            problem = e["msg"].removeprefix("Value error, ") + shown
        key = ".".join(map(str, path)) or "(top level)"
        lines.setdefault(key, f"{where}: {key}: {problem}")  # a union's members each report: keep the first
    return "\n".join(lines.values())


def _key_path(model: type[BaseModel], loc: list) -> tuple[list, type[BaseModel] | None]:
    """The part of an error location that is config keys (pydantic adds union-member labels after
    them; an unknown key, the last part, is no field either), and the model the path ends in."""
    path, current, expect_key = [], model, False
    for part in loc:
        if expect_key or isinstance(part, int):
            path.append(part)
            expect_key = False
            continue
        field = current.model_fields.get(part) if current else None
        if field is None:
            break
        path.append(part)
        current, expect_key = _model_in(field.annotation)
    return path, current


def _model_in(annotation) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's type holds, and whether a mapping key comes first (dict[str, Model])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = typing.get_origin(annotation)
    for arg in typing.get_args(annotation):
        found, _ = _model_in(arg)
        if found is not None:
            return found, origin is dict
    return None, False


# The folders whose code and models make a run's outputs (code_digest).
CODE_FOLDERS = ("extract", "filters", "dedup", "packing", "pipelines")
CODE_SUFFIXES = (".py", ".c")


@lru_cache(maxsize=None)
def code_digest(root: Path = Path(__file__).resolve().parents[1]) -> str:
    """Hash of the code a run's outputs come from: the sources of CODE_FOLDERS (Python and the C of the
    compiled extensions), the shipped models (filters/models, documentation aside) and the installed
    versions of this package's dependencies (`root`: the source tree). Part of every stage's fingerprint,
    so that a finished stage is not reused by another version of the code or of a library (resiliparse,
    fastText...)."""
    from importlib import metadata

    digest, models = hashlib.sha256(), root / "filters" / "models"
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            model = path.parent == models and path.suffix != ".md"
            if path.is_file() and (path.suffix in CODE_SUFFIXES or model):
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    try:
        requirements = metadata.requires("curate") or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        requirements = []
    for requirement in sorted(r for r in requirements if "extra ==" not in r):  # not the dev tools
        name = requirement.split(";")[0].split("==")[0].split("[")[0].strip()
        try:
            digest.update(f"{name}=={metadata.version(name)}\0".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} absent\0".encode())
    return digest.hexdigest()[:16]


def stage_fingerprint(cfg: BaseModel, stage: str, upstream: str | None, sections: tuple[str, ...] = (),
                      side: dict | None = None, input_files: list[dict] | None = None) -> str:
    """Hash of everything that determines a stage's output: its config section and the other
    `sections` it uses (as their `model_dump()`), the fingerprints of the stages whose outputs it also
    reads (`side`), the code (`code_digest`), and the upstream stage's fingerprint, or for a stage that
    reads the input files itself (upstream None) the `input_files`. A finished stage is reused only if
    this matches."""
    values = cfg.model_dump()
    payload = {"stage": stage, "section": values.get(stage), "upstream": upstream, "code": code_digest(),
               "write_dropped": cfg.write_dropped, "sections": {s: values[s] for s in sections}}
    if side:
        payload["side"] = side
    if upstream is None:  # the matched files themselves (path, size, mtime), not the patterns
        payload["input"] = input_files
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
