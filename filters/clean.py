"""Line-level boilerplate removal after extraction, before the quality rules judge the document:
- C4's policy and javascript line rules (Raffel et al. 2020, §2.2; datatrove C4QualityFilter
  `filter_policy` / `filter_javascript`): main-content extractors still let cookie banners and
  "enable JavaScript" notices through; C4 drops any line containing these phrases;
- link-list lines: a line that only lists links ("http://ffp5727.cn | http://www.ffp5727.cn | ...",
  a link farm's footer; "example.com · example.org · ...") carries no prose, and left in, a page's
  line-level rules judge it by that line (RefinedWeb's line-wise corrections, Penedo et al. 2023,
  likewise take out the navigation and counter lines that extraction leaves);
- with `quality.boilerplate_model`, the lines filters/boilerplate.py's context model calls boilerplate
  (menus one item per line, share bars, bylines, photo credits, "Related" lists: unpunctuated lines judged with
  their neighbours), first, on the extractor's text as the model was fitted on it.
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


# A URL, or a domain name with an optional path.
_LINK = re.compile(r"(?:https?://|www\.)\S+|\b[\w-]+(?:\.[\w-]+)*\.[a-z]{2,}\b(?:/\S*)?", re.I)
_SEPARATORS = re.compile(r"[\s|·•,;/\-–—>»]+")
MIN_LINKS, LINK_SHARE = 3, 0.8


def remove_link_list_lines(text: str) -> tuple[str, int]:
    """(text without lines of >= MIN_LINKS links that make up >= LINK_SHARE of the line's characters
    once separators are set aside, number of lines removed)."""
    if text.count(".") < MIN_LINKS:
        return text, 0
    lines = text.split("\n")
    kept = []
    for line in lines:
        links = _LINK.findall(line)
        if len(links) >= MIN_LINKS:
            chars = len(_SEPARATORS.sub("", line))
            if sum(len(_SEPARATORS.sub("", link)) for link in links) >= LINK_SHARE * chars:
                continue
        kept.append(line)
    if len(kept) == len(lines):
        return text, 0
    return "\n".join(kept).strip(), len(lines) - len(kept)


def clean_for_rules(text: str, c4_lines: bool, link_lines: bool, model_lines: bool = False
                    ) -> tuple[str, dict[str, int]]:
    """The text the quality rules judge, and the lines each step removed (the quality stage's
    `boilerplate_model_lines`, `boilerplate_lines` and `link_list_lines` scores)."""
    removed = {}
    if model_lines:
        from filters.boilerplate import remove_context_boilerplate

        text, removed["boilerplate_model_lines"] = remove_context_boilerplate(text)
    if c4_lines:
        text, removed["boilerplate_lines"] = remove_boilerplate_lines(text)
    if link_lines:
        text, removed["link_list_lines"] = remove_link_list_lines(text)
    return text, removed
