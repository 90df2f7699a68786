"""Main-text extraction accuracy and speed against human-annotated article bodies, every engine over the
same pages in one run.

Ground truth: scrapinghub/article-extraction-benchmark (MIT; 181 real article pages, the annotated
`articleBody` of each; ../shared/data/html/scrapinghub_aeb, present on dev machines only). Each page is
decoded once (extract.html.decode_html, the pipeline's charset rules) and handed to:
- `default`: extract.html.extract_main_text with the default engine, what the text branch runs;
- `resiliparse_bare`: resiliparse's extract_plain_text(main_content=True) with its defaults;
- `trafilatura`: trafilatura.extract with its defaults;
- `trafilatura_precision`: the same with favor_precision=True;
- `trafilatura_engine`: extract_main_text with `engine: trafilatura` (the pipeline's trafilatura settings).

Scores, as the benchmark's own evaluation and the issue figures use them: per page, the bag of
lower-cased word tokens (\\w+) of the output against the annotation's; precision = shared tokens /
output tokens, recall = shared / annotated (an empty output: precision 0); F1 of the two; each
averaged over pages. Prints one JSON object: per engine precision, recall, f1, docs_per_s (extraction
calls only, one core) and the speed relative to trafilatura's default.

    .venv/bin/python benchmarks/extraction_eval.py [--data ../shared/data/html/scrapinghub_aeb]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "html" / "scrapinghub_aeb"
TOKEN = re.compile(r"\w+")


def tokens(text: str) -> Counter:
    return Counter(TOKEN.findall(text.lower()))


def scores(predicted: str, truth: str) -> tuple[float, float, float]:
    pred, gold = tokens(predicted), tokens(truth)
    shared = sum((pred & gold).values())
    p = shared / sum(pred.values()) if pred else 0.0
    r = shared / sum(gold.values()) if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def engines() -> dict:
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text

    from extract.html import extract_main_text

    return {
        "default": lambda html: extract_main_text(html).strip(),
        "resiliparse_bare": lambda html: extract_plain_text(html, main_content=True),
        "trafilatura": lambda html: trafilatura.extract(html) or "",
        "trafilatura_precision": lambda html: trafilatura.extract(html, favor_precision=True) or "",
        "trafilatura_engine": lambda html: extract_main_text(html, "trafilatura").strip(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args(argv)
    truth_file = args.data / "ground-truth.json"
    if not truth_file.exists():
        raise SystemExit(f"ground truth not found: {truth_file} (pass --data FOLDER)")
    from extract.html import decode_html

    truth = json.loads(truth_file.read_text())
    pages = []
    for key, entry in sorted(truth.items()):
        raw = gzip.decompress((args.data / "html" / f"{key}.html.gz").read_bytes())
        pages.append((decode_html(raw, "").text, entry["articleBody"]))
    results = {}
    for name, fn in engines().items():
        fn(pages[0][0])  # imports and first-call set-up are not a page's cost
        outputs, seconds = [], 0.0
        for html, _ in pages:
            start = time.perf_counter()
            outputs.append(fn(html))
            seconds += time.perf_counter() - start
        per_page = [scores(out, gold) for out, (_, gold) in zip(outputs, pages)]
        results[name] = {k: round(sum(s[i] for s in per_page) / len(per_page), 4)
                         for i, k in enumerate(("precision", "recall", "f1"))}
        results[name]["docs_per_s"] = round(len(pages) / seconds, 1)
    base = results["trafilatura"]["docs_per_s"]
    for r in results.values():
        r["speed_vs_trafilatura"] = round(r["docs_per_s"] / base, 2)
    print(json.dumps({"benchmark": "main-text extraction vs annotated article bodies", "data": str(args.data),
                      "pages": len(pages), "metric": "per-page bag-of-tokens precision/recall/F1, averaged",
                      "engines": results,
                      "goal": "default f1 >= trafilatura f1 at >= 10x trafilatura's docs/s"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
