"""The compiled paths against their oracles (the Python implementations, which are also their fallbacks; the
Hugging Face tokenizer for the token ids), on real pages: ms per document for both, the speed-up, and whether
every result was the same (the compiled PDF layout is measured by benchmarks/pdf.py, against a bare pypdfium2
loop).

    python benchmarks/compiled.py [--warc ../shared/data/corpus/mixed-dev.warc.gz] [--repeat 3]

Paths measured, on the main text of every HTML page of the WARC (as the extract stage gets it):
- the word tokenizer (filters/_words.c `tokenize` vs filters/quality.py tokenize_python);
- the Gopher quality rules' word statistics (`word_stats` vs word_stats_python; English stop words);
- the Gopher repetition rules' word n-gram coverage (filters/_ngrams.c vs ngram_coverage_python), with the
  quality stage's default n (top 2-4, duplicate 5-10);
- the rules' counts over the whole text (`text_counts` vs text_counts_python: symbol tokens, ellipses,
  Hangul jamo, Han/Kana, numbers, wide characters);
- the template-line step's line normalisation (filters/template_lines.py `normalised_lines` vs
  normalised_lines_python);
- exact and near-duplicate dedup's word runs (dedup/exact.py `word_runs` vs word_runs_python, on the
  casefolded text, as `normalize_for_hash` gives it them);
- the synthetic-text stage's style counts (filters/synthetic.py `style_counts` vs style_counts_python, on
  the prose sample the stage takes and its lower-cased form, as `style_features` gives them);
- the interleaved branch's paragraph rules' counts (filters/nodes.py `paragraph_counts` vs
  paragraph_counts_python: characters neither letters nor marks, punctuation marks), on each line of the
  text, as a web document's paragraphs are judged;
- the paragraph rules' word repetition (filters/nodes.py `word_repetition` vs word_repetition_python: the share
  of word 5-grams that repeat), on the words of each line of the text, as the paragraph rules tokenize it;
- the cross-lingual stage's anchors (dedup/crosslingual.py `anchors` vs anchors_python), with the page's
  language;
- the boilerplate model's line scores (filters/boilerplate.py `line_scores`, filters/_boilerplate.c after
  the line classes' regexes, vs line_scores_python), with the shipped head, on the text's lines;
- the DeepSeek-V3 tokenizer's token ids (packing/pieces.py: packing/_pieces.c's pre-tokenizer and the cache
  of the pieces' ids, vs the Hugging Face tokenizer itself, its oracle), one text at a time as the pack
  stage's batches of one would, with the cache the passes before filled ("tokenizer") and with an empty
  cache at the start of each pass ("tokenizer_cold_cache": every piece met for the first time costs the
  Hugging Face BPE).
Each timing is the best of --repeat passes over all documents, the two implementations alternating.
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


def page_texts(warc: Path) -> list[str]:
    """The main text of every HTML page of `warc` that has a word, as the quality rules get it."""
    from extract.html import page_html
    from extract.images import read_pages_and_images
    from extract.sandbox import run_engine
    from filters.quality import tokenize_python

    out = []
    for page in read_pages_and_images(warc)[0]:
        html, failure = page_html(page, 10_000_000)
        if not failure:
            text = run_engine(html, "resiliparse")
            if tokenize_python(text):
                out.append(text)
    return out


def timed_pass(fn, docs: list, args: tuple) -> tuple[float, list]:
    started = time.perf_counter()
    results = [fn(doc, *args) for doc in docs]
    return time.perf_counter() - started, results


def compare(compiled, python, docs: list, args: tuple, repeat: int) -> dict:
    """Both implementations over `docs`, alternating: best ms per document each, the speed-up, the same?"""
    seconds = {"compiled": [], "python": []}
    same = True
    for _ in range(repeat):
        s_c, r_c = timed_pass(compiled, docs, args)
        s_p, r_p = timed_pass(python, docs, args)
        seconds["compiled"].append(s_c)
        seconds["python"].append(s_p)
        same = same and r_c == r_p
    ms = {k: round(min(v) * 1000 / len(docs), 4) for k, v in seconds.items()}
    return {"ms_per_doc": ms, "speedup": round(ms["python"] / ms["compiled"], 1), "identical": same}


def tokenizer_paths(texts: list[str], repeat: int) -> dict:
    """The compiled pieces against the Hugging Face tokenizer, with a warm and with a cold piece cache."""
    from packing.tokenizer import DocTokenizer

    tok = DocTokenizer()
    pieces, hf = tok.pieces, tok.tok

    def compiled(text):
        return pieces.encode_texts([text])[0].tolist()

    def python(text):
        return hf.encode(text, add_special_tokens=False).ids

    def cold(text):
        if text is texts[0]:
            pieces.cache.clear()
        return compiled(text)

    return {"tokenizer": compare(compiled, python, texts, (), repeat),
            "tokenizer_cold_cache": compare(cold, python, texts, (), repeat)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warc", type=Path, default=DEFAULT_WARC)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from dedup import crosslingual, exact
    from filters import boilerplate, nodes, quality, synthetic, template_lines
    from filters._ngrams import ngram_coverage
    from filters._words import text_counts, tokenize, word_stats

    texts = page_texts(args.warc)
    docs = [quality.tokenize_python(t) for t in texts]
    samples = [synthetic.prose_sample(t) for t in texts]
    lowered_samples = [(s.lower().replace("\u2019", "'"), s) for s in samples]
    stop = quality.QualityFilter(quality.QualityConfig())._stop_words["en"]
    classes = quality.char_classes()
    paths = {
        "tokenize": compare(lambda text: tokenize(text, classes), quality.tokenize_python, texts, (), args.repeat),
        "word_stats": compare(lambda words, s: word_stats(words, s, classes), quality.word_stats_python, docs,
                              (stop,), args.repeat),
        "ngram_coverage": compare(ngram_coverage, quality.ngram_coverage_python, docs,
                                  ((2, 3, 4), (5, 6, 7, 8, 9, 10)), args.repeat),
        "text_counts": compare(lambda text: text_counts(text, classes), quality.text_counts_python, texts, (),
                               args.repeat),
        "normalised_lines": compare(template_lines.normalised_lines, template_lines.normalised_lines_python, texts,
                                    (), args.repeat),
        "word_runs": compare(exact.word_runs, exact.word_runs_python, [t.casefold() for t in texts], (), args.repeat),
        "style_counts": compare(lambda pair: synthetic.style_counts(*pair),
                                lambda pair: synthetic.style_counts_python(*pair), lowered_samples, (), args.repeat),
        "paragraph_counts": compare(lambda lines: [nodes.paragraph_counts(line) for line in lines],
                                    lambda lines: [nodes.paragraph_counts_python(line) for line in lines],
                                    [t.split("\n") for t in texts], (), args.repeat),
        "word_repetition": compare(lambda lines: [nodes.word_repetition(words, 5) for words in lines],
                                   lambda lines: [nodes.word_repetition_python(words, 5) for words in lines],
                                   [[quality.tokenize_python(line.lower()) for line in t.split("\n")] for t in texts],
                                   (), args.repeat),
        "anchors": compare(lambda text: crosslingual.anchors(text, "en"), lambda text: crosslingual.anchors_python(
            text, "en"), texts, (), args.repeat),
        "boilerplate_scores": compare(boilerplate.line_scores, boilerplate.line_scores_python,
                                      [t.split("\n") for t in texts], (boilerplate.load_model(),), args.repeat),
        **tokenizer_paths(texts, args.repeat),
    }
    result = {"warc": portable(str(args.warc)), "documents": len(docs), "words": sum(map(len, docs)), **paths}
    print(json.dumps(result, indent=2))
    record(__file__, {
        f"{name}, ms per page, compiled vs {'Hugging Face' if name.startswith('tokenizer') else 'Python'}": (
            f"{r['ms_per_doc']['compiled']} vs {r['ms_per_doc']['python']} ({r['speedup']}x, "
            f"{'identical' if r['identical'] else 'DIFFERENT'} on {len(docs):,} pages)") for name, r in paths.items()},
        result)


if __name__ == "__main__":
    main()
