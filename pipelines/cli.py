"""`curate` command line: run the pipeline, print a finished run's stats."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys


def _run(args, beam_args):
    from pipelines.config import load_config
    from pipelines.run import run

    cfg = load_config(args.config, input=args.input, output=args.output, workers=args.workers,
                      stage_cost=args.stage_cost or None)
    if beam_args:
        cfg.beam_args = list(cfg.beam_args) + beam_args
    stages = args.stages.split(",") if args.stages else None
    run(cfg, stages=stages, force=args.force, progress=not args.quiet)


def _score(args, _):
    from filters.score import BadLine, TextScorer, score_jsonl
    from pipelines.config import UserError, load_config

    cfg = load_config(args.config)
    if not os.path.isfile(args.input):
        raise UserError(f"--input {args.input}: no such file")
    try:
        scorer = TextScorer(cfg.quality, cfg.language, cfg.synthetic)
        scored, skipped = score_jsonl(args.input, args.output, scorer)
    except BadLine as err:
        raise UserError(str(err)) from None
    print(f"scored {scored} lines, {skipped} without a text field -> {args.output}")


def _extract(args, _):
    from pipelines.config import load_config
    from pipelines.extract_pages import extract_to_jsonl

    summary = extract_to_jsonl(args.input, args.output, load_config(args.config))
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(summary["reasons"].items(), key=lambda kv: -kv[1]))
    print(f"{summary['pages']} pages, {summary['with_text']} with text" + (f"; dropped: {reasons}" if reasons else "")
          + f" -> {args.output}")


def _train_filter(args, _):
    from filters.train_synthetic import train_filter

    metrics = train_filter(args.kind, args.data, args.out, seed=args.seed)
    print(json.dumps(metrics, indent=1, default=str))


def _fit_lm_head(args, _):
    import yaml

    from filters.lm_detect import SamplingDiscrepancy
    from filters.train_synthetic import fit_lm_head

    lm = SamplingDiscrepancy(args.lm_model, device=args.lm_device, max_tokens=args.lm_max_tokens,
                             dtype=args.lm_dtype).load()
    fitted = fit_lm_head(lm, args.data, per_class=args.per_class)
    fitted["lm_dtype"] = args.lm_dtype
    keys = ("lm_model", "lm_max_tokens", "lm_dtype", "lm_logit", "llm_generated_threshold", "lm_band")
    print(f"# fitted on {fitted['fit_texts']} texts (discrepancy AUC {fitted['fit_auc_discrepancy']}), "
          f"threshold from {fitted['calibration_human_pages']} calibration human pages; add to your config:")
    print(yaml.safe_dump({"synthetic": {k: fitted[k] for k in keys}}, sort_keys=False), end="")


def _stages(args, _):
    from pipelines.describe import stage_reference

    print(stage_reference(), end="")


def _stats(args, _):
    from pipelines.stats import format_table, load_summary

    print(format_table(load_summary(args.dir)))


def _report(args, _):
    from pipelines.config import UserError, load_config
    from apache_beam.io.filesystems import FileSystems

    from pipelines.report import run_config, write_report

    cfg = run_config(args.dir)
    if cfg is None:  # a run made before runs saved their config: thresholds as configured by default
        cfg = load_config(None, output=args.dir).model_dump()
    try:
        html_path, md_path = write_report(args.dir, cfg, args.max_rows)
    except FileNotFoundError as err:
        raise UserError(f"{err}; pass a run's output folder (its --output)") from None
    if args.markdown:
        with FileSystems.open(md_path) as fh:
            print(fh.read().decode("utf-8"), end="")
    print(f"report: {html_path} and {md_path}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # the pretraining stage has its own options (trainer/cli.py)
        from trainer.cli import main as train_main

        return train_main(argv[1:])
    beam_args = []
    if "--" in argv:  # everything after `--` goes to Beam untouched
        i = argv.index("--")
        argv, beam_args = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(prog="curate", description=(
        "DeepSeek-V4.1-style pretraining data curation on Apache Beam: run the pipeline, inspect a run, score "
        "texts, train the shipped filters, pretrain on the shards. `curate COMMAND --help` for each."))
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the pipeline (no arguments: the bundled real sample)",
                       epilog="Everything after `--` goes to Beam untouched, e.g. `curate run -- "
                              "--runner=PortableRunner --job_endpoint=localhost:8099`.")
    r.add_argument("--config", help="YAML run config (defaults: configs/local.yaml semantics)")
    r.add_argument("--input", nargs="+", action="extend",
                   help="WARC/WET paths or globs (local, gs://, s3://); repeatable")
    r.add_argument("--output", help="output folder")
    r.add_argument("--workers", type=lambda v: v if v == "auto" else int(v),
                   help="local worker processes, >= 1 (>1: multi_processing), or auto (one per 32 MiB of input)")
    r.add_argument("--stages", help="comma-separated stages to (re)run; the stages they read from must be finished "
                                         "(or selected too); stages of other branches that never finished are not run")
    r.add_argument("--force", action="store_true", help="rerun the selected stages even if finished")
    r.add_argument("--quiet", action="store_true", help="no progress lines while it runs (local runners print bytes "
                                                        "read, an ETA and each finished group)")
    r.add_argument("--stage-cost", action="store_true", help="time each stage: ms per page in stats/summary.json "
                                                             "and the table (config key stage_cost)")
    r.set_defaults(func=_run)
    st = sub.add_parser("stages", help="every stage: what it does, its drop reasons, its config keys and defaults")
    st.set_defaults(func=_stages)
    s = sub.add_parser("stats", help="print the per-stage table of a finished run")
    s.add_argument("dir", help="a run's output folder (its --output)")
    s.set_defaults(func=_stats)
    rp = sub.add_parser("report", help="write a finished run's report: OUT/report.html (self-contained) and "
                                       "OUT/report.md")
    rp.add_argument("dir", help="a run's output folder (its --output)")
    rp.add_argument("--max-rows", type=int, default=100_000, help="rows read per output folder for the histograms")
    rp.add_argument("--markdown", action="store_true", help="also print the markdown summary")
    rp.set_defaults(func=_report)
    sc = sub.add_parser("score", help="add every text score to each {\"text\": ...} line of a JSONL file")
    sc.add_argument("--input", required=True, help="JSONL file, one {\"text\": ...} object per line")
    sc.add_argument("--output", required=True, help="JSONL file written: each line with its scores and verdict")
    sc.add_argument("--config", help="run config whose quality/language/synthetic sections to use")
    sc.set_defaults(func=_score)
    ex = sub.add_parser("extract", help="each page of HTML or WARC files as the text the quality rules get, "
                                        "or its drop reason: one JSON line per page")
    ex.add_argument("--input", nargs="+", required=True, help=".html / .html.gz files or WARC / WET files")
    ex.add_argument("--output", required=True, help="JSONL file to write")
    ex.add_argument("--config", help="run config (default configs/local.yaml)")
    ex.set_defaults(func=_extract)
    tf = sub.add_parser("train-filter", help="reproduce a shipped weak-LLM / poor-MT model")
    tf.add_argument("kind", choices=["llm", "mt"])
    tf.add_argument("--data", required=True, help="the shared data folder (llm_detect/, mt_quality/, html/)")
    tf.add_argument("--out", required=True, help="model path (.ftz); metrics go to <out>.json")
    tf.add_argument("--seed", type=int, default=0)
    tf.set_defaults(func=_train_filter)
    fl = sub.add_parser("fit-lm-head", help="calibrate an LM's Fast-DetectGPT discrepancy as a head of llm_generated")
    fl.add_argument("--lm-model", required=True, help="transformers causal LM folder, hub id or .gguf file")
    fl.add_argument("--data", required=True, help="the shared data folder (llm_detect/, mt_quality/, html/)")
    fl.add_argument("--lm-max-tokens", type=int, default=128)
    fl.add_argument("--lm-device", default="cpu")
    fl.add_argument("--lm-dtype", choices=["float32", "bfloat16", "float16"], default=None,
                    help="default: bfloat16 on CUDA, float32 on CPU; calibrate with the dtype you will run")
    fl.add_argument("--per-class", type=int, default=150, help="human and machine training texts scored")
    fl.set_defaults(func=_fit_lm_head)
    sub.add_parser("train", help="pretrain on packed shards (see `curate train --help`)", add_help=False)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Beam's import warns about optional GCP client libraries through the root logger; keep that
    # off the console (a NullHandler stops the last-resort stderr handler), then log our own lines.
    logging.getLogger().addHandler(logging.NullHandler())
    import apache_beam  # noqa: F401

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True,
                        stream=sys.stdout)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    from pipelines.config import UserError

    try:
        args.func(args, beam_args)
    except UserError as err:  # the user's to fix: one line, exit 2 (internal errors keep their traceback)
        print(f"curate: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
