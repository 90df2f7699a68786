"""The compiled n-gram coverage against its Python implementation (its test oracle and fallback), on the
words of real pages: ms per document for both, the speed-up, and whether every result was the same (the
compiled PDF layout is measured by benchmarks/pdf.py, against a bare pypdfium2 loop).

    python benchmarks/compiled.py [--warc ../shared/data/corpus/mixed-dev.warc.gz] [--repeat 3]

Paths measured: the Gopher repetition rules' word n-gram coverage (filters/_ngrams.c vs
filters/quality.py ngram_coverage_python), with the quality stage's default n (top 2-4, duplicate 5-10),
on the tokenized main text of every HTML page of the WARC (as the extract stage gets it). Each timing is
the best of --repeat passes over all documents, the two implementations alternating.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)

from benchmarks.record import portable, record  # noqa: E402

DEFAULT_WARC = ROOT.parent / "shared" / "data" / "corpus" / "mixed-dev.warc.gz"


def page_words(warc: Path) -> list[list[str]]:
    """The tokenized main text of every HTML page of `warc`, as the quality rules see its words."""
    from extract.html import page_html
    from extract.images import read_pages_and_images
    from extract.sandbox import run_engine
    from filters.quality import tokenize

    out = []
    for page in read_pages_and_images(warc)[0]:
        html, failure = page_html(page, 10_000_000)
        if not failure:
            words = tokenize(run_engine(html, "resiliparse"))
            if words:
                out.append(words)
    return out


def timed_pass(fn, docs: list, args: tuple) -> tuple[float, list]:
    started = time.perf_counter()
    results = [fn(words, *args) for words in docs]
    return time.perf_counter() - started, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from filters._ngrams import ngram_coverage
    from filters.quality import ngram_coverage_python

    docs = page_words(args.warc)
    ns = ((2, 3, 4), (5, 6, 7, 8, 9, 10))
    seconds = {"compiled": [], "python": []}
    same = True
    for _ in range(args.repeat):
        s_c, r_c = timed_pass(ngram_coverage, docs, ns)
        s_p, r_p = timed_pass(ngram_coverage_python, docs, ns)
        seconds["compiled"].append(s_c)
        seconds["python"].append(s_p)
        same = same and r_c == r_p
    ms = {k: round(min(v) * 1000 / len(docs), 4) for k, v in seconds.items()}
    result = {"warc": portable(str(args.warc)), "documents": len(docs), "words": sum(map(len, docs)),
              "ngram_coverage": {"ms_per_doc": ms, "speedup": round(ms["python"] / ms["compiled"], 1),
                                 "identical": same}}
    print(json.dumps(result, indent=2))
    record(__file__, {"n-gram coverage, ms per page, compiled vs Python": (
        f"{ms['compiled']} vs {ms['python']} ({result['ngram_coverage']['speedup']}x, "
        f"{'identical' if same else 'DIFFERENT'} on {len(docs):,} pages)")}, result)


if __name__ == "__main__":
    main()
