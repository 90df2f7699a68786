"""Line-level boilerplate removal after extraction: C4's policy and javascript line rules
(Raffel et al. 2020, §2.2; datatrove C4QualityFilter `filter_policy` / `filter_javascript`).

Main-content extractors still let cookie banners and "enable JavaScript" notices through; C4 drops
any line containing these phrases. The document itself is judged later by the quality rules.
"""

from __future__ import annotations

import re

POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
_BOILERPLATE = re.compile("|".join(re.escape(s) for s in POLICY_SUBSTRINGS) + r"|\bjavascript\b", re.I)


def remove_boilerplate_lines(text: str) -> tuple[str, int]:
    """(text without policy/javascript lines, number of lines removed)."""
    lowered = text.lower()  # substring tests first: far cheaper than the regex on clean pages
    if "javascript" not in lowered and not any(s in lowered for s in POLICY_SUBSTRINGS):
        return text, 0
    lines = text.split("\n")
    kept = [line for line in lines if not _BOILERPLATE.search(line)]
    return "\n".join(kept).strip(), len(lines) - len(kept)
