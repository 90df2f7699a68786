"""Run configuration: built-in defaults, deep-merged with a YAML file and CLI overrides."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import yaml

from dedup.image import DEFAULTS as IMAGE_DEFAULTS
from dedup.near import DEFAULTS as NEAR_DEFAULTS
from packing.config import DEFAULTS as PACK_DEFAULTS

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GLOB = str(REPO_ROOT / "sample" / "*.warc.gz")

STAGE_ORDER = ["read", "extract", "language", "quality", "synthetic", "exact_dedup", "near_dedup", "write", "pack",
               "image_pairs"]
LOCAL_CONFIG = REPO_ROOT / "configs" / "local.yaml"

DEFAULTS: dict = {
    "input": [SAMPLE_GLOB],
    "output": "out/sample",
    "runner": "FnApiRunner",
    "workers": 2,
    "beam_args": [],
    "write_dropped": True,
    "stages": list(STAGE_ORDER),
    "read": {"max_record_bytes": 64 << 20},
    "extract": {"engine": "resiliparse", "timeout_ms": 5000, "max_html_bytes": 10 << 20, "min_chars": 1,
                "batch_docs": 64},
    "language": {"model": None, "languages": None, "min_score": 0.5, "max_chars": 2000},
    "quality": {},
    "synthetic": {"llm_model": None, "mt_model": None, "llm_generated_threshold": None,
                  "poor_mt_threshold": None, "max_chars": 1500, "lm_model": None, "lm_reference_model": None,
                  "lm_discrepancy_threshold": None, "lm_logit": None, "lm_device": "cpu", "lm_dtype": None,
                  "lm_max_tokens": 256, "lm_batch": 16},
    "exact_dedup": {"survivor": "earliest_capture"},
    "near_dedup": dict(NEAR_DEFAULTS),
    "write": {"shards": 4},
    "pack": copy.deepcopy(PACK_DEFAULTS),
    "image_pairs": copy.deepcopy(IMAGE_DEFAULTS),
}


class ConfigError(ValueError):
    pass


def _merge(base: dict, override: dict, where: str = "") -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if key not in base:
            raise ConfigError(f"unknown config key {where}{key!r}; known: {sorted(base)}")
        if isinstance(base[key], dict) and base[key] and isinstance(value, dict):
            out[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path: str, seen: tuple = ()) -> dict:
    """A config file's settings over those of its `base:` file (a path relative to it), if it names one."""
    path = os.path.realpath(path)
    if path in seen:
        raise ConfigError(f"config bases form a cycle: {' -> '.join(seen + (path,))}")
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    base = data.pop("base", None)
    if base is None:
        return data
    return _merge_files(_read_yaml(str(Path(path).parent / base), seen + (path,)), data)


def _merge_files(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        out[key] = _merge_files(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def load_config(path: str | None = None, **overrides) -> dict:
    """Defaults <- YAML file (configs/local.yaml when none is given; a file may name a `base:` file it
    extends) <- non-None keyword overrides."""
    cfg = copy.deepcopy(DEFAULTS)
    if path is None and LOCAL_CONFIG.exists():
        path = str(LOCAL_CONFIG)
    if path:
        cfg = _merge(cfg, _read_yaml(path))
    cfg = _merge(cfg, {k: v for k, v in overrides.items() if v is not None})
    if isinstance(cfg["input"], str):
        cfg["input"] = [cfg["input"]]
    syn = cfg["synthetic"]
    if syn["lm_logit"] is not None and (len(syn["lm_logit"]) != 2 or syn["llm_generated_threshold"] is None):
        raise ConfigError("synthetic.lm_logit is [coef, bias] and needs synthetic.llm_generated_threshold set "
                          "with it: the shipped threshold is for the score without the LM (curate fit-lm-head)")
    unknown = [s for s in cfg["stages"] if s not in STAGE_ORDER]
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; known: {STAGE_ORDER}")
    return cfg


def stage_fingerprint(cfg: dict, stage: str, upstream: str | None) -> str:
    """Hash of everything that determines a stage's output: its config section, and the upstream
    stage's fingerprint, or for a stage that reads the WARCs itself (upstream None) the input files
    and read settings. A finished stage is reused only if this matches."""
    payload = {"stage": stage, "section": cfg.get(stage), "upstream": upstream,
               "write_dropped": cfg["write_dropped"]}
    if upstream is None:  # the matched files themselves (path, size, mtime), not the patterns
        payload["input"], payload["read"] = cfg["input_files"], cfg["read"]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
