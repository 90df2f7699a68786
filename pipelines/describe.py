"""`curate stages`: every registered stage with what it does, what it reads and writes, the reasons it
drops with, and every config key with its default and meaning, generated from the registry and the
config models. docs/stages.md is this output (a test keeps them equal)."""

from __future__ import annotations

import inspect
import json

from pydantic import BaseModel

from pipelines.config import RunSettings, default_config
from pipelines.stage import READS_INPUT, READS_OUTPUTS, READS_PREVIOUS, Stage
from pipelines.registry import STAGES

BEGIN, END = "<!-- curate stages: begin -->", "<!-- curate stages: end -->"


def _default(field) -> str:
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return json.dumps(value, default=lambda v: getattr(v, "__name__", str(v)))


def config_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str]]:
    """(key path, default as JSON, description) for every key of a section, nested sections flattened."""
    rows = []
    for name, field in model.model_fields.items():
        nested = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation,
                                                                                       BaseModel) else None
        if nested is not None:
            rows += config_rows(nested, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", _default(field), (field.description or "").replace("|", "\\|")))
    return rows


def _stage_block(stage: Stage, before: Stage | None, ends_group: bool) -> list[str]:
    reads = ("the input files" if stage.reads == READS_INPUT
             else "the final documents of " + ", ".join(f"`{n}`" for n in stage.reads_outputs_of(default_config()))
             if stage.reads == READS_OUTPUTS
             else f"the documents of `{before.name}`" if before is not None else "the documents before it")
    writes = [f"`{stage.documents}`"] if stage.documents and ends_group else []
    writes += [f"`{o}`" for o in stage.outputs if o != stage.documents]
    lines = [f"### {stage.name}", "", inspect.cleandoc(type(stage).__doc__ or ""), "",
             f"Reads {reads}{', or their Parquet output of an earlier run' if stage.starts_group and before is not None and stage.reads == READS_PREVIOUS else ''}; "
             f"writes {', '.join(writes) or 'stats only'} (and `dropped/{stage.name}`, `{stage.name}/stats.json`).", ""]
    reasons = stage.reasons
    lines += [f"Drop reasons: {', '.join(f'`{r}`' for r in reasons)}." if reasons else "Drops nothing.", ""]
    rows = config_rows(stage.config)
    if rows:
        lines += [f"| `{stage.name}.` key | default | meaning |", "|---|---|---|"]
        lines += [f"| `{key}` | `{default}` | {text} |" for key, default, text in rows]
        lines.append("")
    return lines


def stage_reference() -> str:
    """The Markdown reference of the run's top-level keys and every registered stage."""
    lines = ["| top-level key | default | meaning |", "|---|---|---|"]
    for key, default, text in config_rows(RunSettings):
        if key == "input":
            default = '["sample/*.warc.gz"]'
        lines.append(f"| `{key}` | `{default}` | {text} |")
    lines.append("")
    stages = list(STAGES.values())
    for i, stage in enumerate(stages):
        after = stages[i + 1] if i + 1 < len(stages) else None
        ends_group = after is None or after.starts_group or after.reads == READS_INPUT
        lines += _stage_block(stage, stages[i - 1] if i else None, ends_group)
    return "\n".join(lines).rstrip() + "\n"
