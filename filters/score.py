"""`curate score`: every text score the pipeline computes, added to each line of a JSONL file, so
users can choose thresholds before filtering. No Beam; the same modules the pipeline stages call."""

from __future__ import annotations

import json

from filters.language import LanguageIdentifier
from filters.lm_detect import SamplingDiscrepancy, document_sample
from filters.quality import QualityConfig, QualityFilter
from filters.synthetic import SyntheticTextScorer, with_lm_head


class TextScorer:
    def __init__(self, quality: dict | None = None, language: dict | None = None, synthetic: dict | None = None):
        language, synthetic = language or {}, synthetic or {}
        self.lid = LanguageIdentifier(language.get("model"), language.get("max_chars", 2000))
        self.quality = QualityFilter(QualityConfig.from_dict(quality or {}))
        self.synthetic = SyntheticTextScorer(synthetic.get("llm_model"), synthetic.get("mt_model")).load()
        self.max_chars = synthetic.get("max_chars", 1500)
        self.lm, self.lm_logit = None, synthetic.get("lm_logit")
        if synthetic.get("lm_model"):  # Fast-DetectGPT discrepancy, as the synthetic stage computes it
            self.lm = SamplingDiscrepancy.from_config(synthetic).load()

    def __call__(self, text: str) -> dict:
        lang, lang_score = self.lid(text)
        failed, values = self.quality(text, lang)
        scores = {"lang": lang, "lang_score": round(lang_score, 6), "quality": values,
                  "quality_failed": failed, **self.synthetic.score(text, lang)}
        if self.lm is not None and scores["llm_generated_supported"]:
            d = scores["llm_lm_discrepancy"] = self.lm.score([document_sample(text, self.max_chars)])[0]
            scores["llm_generated"] = with_lm_head(scores["llm_generated"], d, self.lm_logit)
        return scores


def score_jsonl(input_path: str, output_path: str, scorer: TextScorer) -> int:
    """Adds the scores to every `{"text": ...}` line; a line without text gets `"error"`. Returns lines."""
    n = 0
    with open(input_path, encoding="utf-8") as src, open(output_path, "w", encoding="utf-8") as out:
        for line in src:
            if not line.strip():
                continue
            row = json.loads(line)
            text = row.get("text")
            row.update(scorer(text) if isinstance(text, str) else {"error": "no text field"})
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
