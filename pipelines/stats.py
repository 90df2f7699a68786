"""The per-stage table printed after every run and by `curate stats DIR`, and each stage's cost."""

from __future__ import annotations

from pipelines import io
from pipelines.config import UserError


def load_summary(root: str) -> dict:
    summary = io.read_json(io.join(root, "stats", "summary.json"))
    if summary is None:
        raise UserError(f"no finished run under {root} (no stats/summary.json); give a run's --output folder")
    return summary


# Beam's own execution time per transform: the SDK harness's state sampler charges each moment of a
# bundle to the transform whose code runs (a DoFn's process, start and finish; a fused consumer's time is
# its own, not its producer's); runners that report monitoring infos (FnApiRunner; Dataflow shows it as
# each step's wall time) give the sum over every worker.
TRANSFORM_MSECS = ("beam", "metric:ptransform_execution_time:total_msecs:v1")  # namespace, name


def transform_msecs(result) -> dict[str, int]:
    """{transform label: milliseconds spent in it, summed over workers} from a finished pipeline's
    result; {} when the runner reports no monitoring infos."""
    monitoring = getattr(result, "monitoring_metrics", None)
    if monitoring is None:
        return {}
    out: dict[str, int] = {}
    for metric in monitoring().query().get("counters", []):
        if (metric.key.metric.namespace, metric.key.metric.name) == TRANSFORM_MSECS:
            out[metric.key.step] = out.get(metric.key.step, 0) + int(metric.committed or 0)
    return out


def stage_costs(msecs: dict[str, int], labels: dict[str, set], pages: int, core_s: float) -> dict:
    """Each stage's cost: the milliseconds of the transforms it added (`labels`: stage -> transform
    labels; its steps, its counters, and its group's writes when it ends the group), per page read
    (`pages`: the documents the run read) and in all; `outside_stages` for transforms no stage added
    (the loss audit); `runner_ms_per_page`: the worker processes' time (`core_s`, wall clock x workers)
    that no transform was charged for: bundle and data-plane machinery, start-up, idle."""
    stage_of = {label: name for name, names in labels.items() for label in names}
    per_stage = {name: 0 for name in labels}
    outside = 0
    for label, ms in msecs.items():
        stage = _owner(label, stage_of)
        if stage is not None:
            per_stage[stage] += ms
        else:
            outside += ms
    per_page = (lambda ms: round(ms / pages, 3)) if pages else (lambda ms: None)
    charged = sum(per_stage.values()) + outside
    return {"pages": pages,
            "stages": {name: {"ms": ms, "ms_per_page": per_page(ms)} for name, ms in per_stage.items()},
            "outside_stages": {"ms": outside, "ms_per_page": per_page(outside)},
            "transforms_ms_per_page": per_page(charged),
            "runner_ms_per_page": per_page(max(0.0, core_s * 1000 - charged))}


def _owner(label: str, stage_of: dict[str, str]) -> str | None:
    """The stage that added the transform `label`, or the composite it is part of: the runner reports
    the parts it expands a transform into (a combine's Precombine, Merge and ExtractOutputs, a Flatten's
    Transcode) under labels below the one the pipeline applied."""
    while label:
        if label in stage_of:
            return stage_of[label]
        label = label.rpartition("/")[0]
    return None


def format_table(summary: dict, top_reasons: int = 4) -> str:
    rows = [("stage", "in", "out", "dropped", "done_s", "top drop reasons")]
    previous_group = None
    for s in summary["stages"]:
        dropped = s.get("dropped", {})
        top = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))[:top_reasons]
        reasons = ", ".join(f"{r}={n}" for r, n in top) + (" ..." if len(dropped) > top_reasons else "")
        # one pipeline runs every stage, fused where Beam can: what is measured is when each group's
        # outputs were complete, seconds after the pipeline started
        same_group = s.get("group") and s.get("group") == previous_group
        previous_group = s.get("group")
        done = "reused" if s.get("reused") else "" if same_group else f"{s.get('done_s', 0):.1f}"
        rows.append((s["stage"], str(s["in"]), str(s["out"]), str(sum(dropped.values())), done, reasons))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r[:5], widths)))
             + "  " + r[5] for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    wall = [f"\npipeline: {summary['wall_s']:.1f} s ({summary.get('runner')}, {summary.get('workers')} "
            f"worker(s))"] if "wall_s" in summary else []
    return "\n".join(lines + wall + _cost_lines(summary) + _phase_lines(summary) + _audit_lines(summary))


def _cost_lines(summary: dict) -> list[str]:
    """With stage_cost: ms per page read, per stage that ran, and what no transform was charged for."""
    cost = summary.get("cost")
    if not cost or not cost["pages"]:
        return []
    stages = ", ".join(f"{name} {c['ms_per_page']:.2f}" for name, c in cost["stages"].items())
    return [f"\ncost, ms per page read ({cost['pages']} pages): {stages}; outside stages "
            f"{cost['outside_stages']['ms_per_page']:.2f}; in transforms {cost['transforms_ms_per_page']:.2f}, "
            f"runner and idle {cost['runner_ms_per_page']:.2f}"]


def _audit_lines(summary: dict) -> list[str]:
    audit = summary.get("audit")
    if not audit:
        return []
    return [f"\nloss audit: {audit['rows']} rows from {audit['files']} input files, each in exactly one output: "
            + ("ok" if audit["ok"] else "FAILED")]


def _phase_lines(summary: dict) -> list[str]:
    """One line per packing phase: tokens in/out, chunks, sequences, padding rate and status."""
    extra = next((s.get("extra", {}) for s in summary["stages"] if s["stage"] == "pack"), {})
    phases = sorted({k.split("/")[1] for k in extra if k.startswith("pack/")})
    if not phases:
        return []
    out = [f"\npack: {extra.get('tokenize/docs', 0)} docs, {extra.get('tokenize/tokens', 0)} tokens in; "
           f"shared between phases: {extra.get('phase/shared_docs', 0)} docs"]
    text = extra.get("mix/text/tokens", 0)
    multimodal = extra.get("mix/pair/tokens", 0) + extra.get("mix/interleaved/tokens", 0)
    status = next((k.split(":", 1)[1] for k in extra if k.startswith("mix/status:")), "?")
    ratio = f"{text / multimodal:.4f} : 1" if multimodal else "no multimodal tokens"
    out.append(f"  mix: text {text} : multimodal {multimodal} tokens = {ratio} ({status}); "
               f"{extra.get('mix/replaced_by_multimodal', 0)} text docs replaced by their multimodal twin; "
               f"see shards/manifest.json")
    for ph in phases:
        status = next((k.split(":", 1)[1] for k in extra if k.startswith(f"pack/{ph}/status:")), "?")
        out.append(f"  {ph:<10} tokens={extra.get(f'pack/{ph}/tokens', 0):>12}  "
                   f"chunks={extra.get(f'pack/{ph}/chunks', 0):>9}  sequences={extra.get(f'pack/{ph}/sequences', 0):>8}  "
                   f"padding_rate={extra.get(f'pack/{ph}/padding_rate', 0.0):.2e}  status={status}")
    return out
