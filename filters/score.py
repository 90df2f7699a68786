"""`curate score`: every text score the pipeline computes, added to each line of a JSONL file, with the
verdict the stages would give, so users can choose thresholds before filtering. No Beam; the same
modules the pipeline stages call."""

from __future__ import annotations

import json

from filters.language import LanguageIdentifier, language_drop
from filters.lm_detect import SamplingDiscrepancy, document_sample
from filters.quality import QualityConfig, QualityFilter
from filters.synthetic import SyntheticTextScorer, drop_thresholds, synthetic_drop, with_lm_head


class BadLine(ValueError):
    """A line of the input that is not a JSON object."""


class TextScorer:
    """Every score of the language, quality and synthetic stages for one text, and their verdict:
    `keep`, or the first reason in stage order, with the same config sections as a run (its `quality`,
    `language` and `synthetic` sections)."""

    def __init__(self, quality: QualityConfig, language, synthetic):
        self.lid = LanguageIdentifier(language.model, language.max_chars)
        self.min_lang_score, self.languages = language.min_score, language.languages
        self.quality = QualityFilter(quality)
        self.synthetic = SyntheticTextScorer(synthetic.llm_model, synthetic.mt_model).load()
        self.thresholds = drop_thresholds(self.synthetic.thresholds(), synthetic)
        self.max_chars = synthetic.max_chars
        self.lm, self.lm_logit = None, synthetic.lm_logit
        if synthetic.lm_model:  # Fast-DetectGPT discrepancy, as the synthetic stage computes it
            self.lm = SamplingDiscrepancy.from_config(synthetic).load()

    def __call__(self, text: str) -> dict:
        lang, lang_score = self.lid(text)
        failed, values = self.quality(text, lang)
        scores = {"lang": lang, "lang_score": round(lang_score, 6), "quality": values,
                  "quality_failed": failed, **self.synthetic.score(text, lang)}
        if self.lm is not None and scores["llm_generated_supported"]:
            d = scores["llm_lm_discrepancy"] = self.lm.score([document_sample(text, self.max_chars)])[0]
            scores["llm_generated"] = with_lm_head(scores["llm_generated"], d, self.lm_logit)
        scores["verdict"] = self._verdict(scores)
        return scores

    def _verdict(self, s: dict) -> str:
        return (language_drop(s["lang"], s["lang_score"], self.min_lang_score, self.languages)
                or (s["quality_failed"] or [None])[0] or synthetic_drop(s, self.thresholds) or "keep")


def score_jsonl(input_path: str, output_path: str, scorer: TextScorer) -> tuple[int, int]:
    """Adds the scores to every `{"text": ...}` line; a line without text gets `"error"`. Returns
    (lines scored, lines without a text field); raises BadLine for a line that is not a JSON object."""
    scored = skipped = 0
    with open(input_path, encoding="utf-8") as src, open(output_path, "w", encoding="utf-8") as out:
        for number, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadLine(f"{input_path}:{number}: not JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise BadLine(f"{input_path}:{number}: not a JSON object")
            text = row.get("text")
            if isinstance(text, str):
                row.update(scorer(text))
                scored += 1
            else:
                row["error"] = "no text field"
                skipped += 1
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return scored, skipped
