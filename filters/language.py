"""Language identification with fastText lid.176 (Joulin et al. 2016), as in CCNet, FineWeb and dolma."""

from __future__ import annotations

from pathlib import Path

LID_MODEL = Path(__file__).parent / "models" / "lid.176.ftz"


class LanguageIdentifier:
    """Top-1 language and probability of a text; `max_chars` bounds the cost on long documents.
    `model_path` is a local file (a pipeline stage copies a remote model first: pipelines/io.local_copy)."""

    def __init__(self, model_path: str | None = None, max_chars: int = 2000):
        import fasttext

        self.model = fasttext.load_model(str(model_path or LID_MODEL))
        self.max_chars = max_chars

    def __call__(self, text: str) -> tuple[str, float]:
        sample = " ".join(text[: self.max_chars].split())  # fastText predicts one line
        if not sample:
            return "unknown", 0.0
        labels, probs = self.model.predict(sample, k=1)
        return labels[0].removeprefix("__label__"), min(float(probs[0]), 1.0)


def language_drop(lang: str, score: float, min_score: float, languages: list[str] | None) -> str | None:
    """The language stage's verdict: None (kept), `lang_low_confidence` or `lang_not_allowed`."""
    if score < min_score:
        return "lang_low_confidence"
    if languages and lang not in languages:
        return "lang_not_allowed"
    return None
