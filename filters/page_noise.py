"""Training texts made page-like, identically for both classes: the scorers run on extracted web pages
(titles, bylines, boilerplate lines, paragraphs), so page furniture must never be what tells the classes apart."""

from __future__ import annotations

import random
import re

from filters.synthetic import normalize, prose_sample

_SENT_SPLIT = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+(?=\S)")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT_SPLIT.split(" ".join(text.split())) if s.strip()]


# the furniture an extractor leaves around a page's text
_FIRST = ["Michael", "Sarah", "David", "Anna", "James", "Laura", "Thomas", "Maria", "Peter", "Julia", "Wei",
          "Li", "Jan", "Sophie", "Ahmed", "Chris", "Emma", "Lukas", "Yuki", "Carlos"]
_LAST = ["Smith", "Miller", "Schmidt", "Wang", "Brown", "Garcia", "Müller", "Chen", "Wilson", "Kowalski",
         "Meyer", "Taylor", "Nguyen", "Rossi", "Johnson", "Becker", "Zhang", "Clarke", "Dubois", "Khan"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_BYLINES = ["By {n}", "{n}", "By {n} | {d}", "{d}", "Posted on {d} by {n}", "{n} · {d}", "Published {d}",
            "Updated: {d}, {t}", "Written by {n} on {d}", "{d} — {n}", "Staff writer", "Von {n}, {dd}",
            "{dd} | {n}", "Autor: {n}", "{zd} 作者：{n}", "Author: {n} | {r} min read", "{d} {t} GMT",
            "{n}, Correspondent", "Last modified on {d}", "Admin | {d} | {c} Comments"]
_SHORT_BP = ["Share", "Tweet", "Home", "News", "Menu", "Search", "Read more", "Advertisement", "Comments",
             "Related", "Related articles", "Share this:", "Facebook Twitter Email", "Leave a reply",
             "Subscribe", "Log in", "Next article", "Previous post", "Tags: news, world", "Print",
             "Home » News » World", "Startseite", "Teilen", "Mehr lesen", "Anzeige", "首页", "新闻", "分享",
             "Copyright © {y}", "All rights reserved.", "Back to top", "Top stories", "Most popular",
             "Photo: Getty Images", "Image caption", "Kommentare ({c})", "{c} comments", "Sponsored"]
_LONG_BP = [
    "Sign up for our newsletter to get the best stories delivered straight to your inbox every morning.",
    "This article was originally published on our partner site and has been republished with permission.",
    "If you enjoyed this article, please consider sharing it with your friends and family on social media.",
    "Have a story idea or a tip for our reporters? Send us a message and we will get back to you.",
    "The views expressed in this post are those of the author and do not necessarily reflect those of the site.",
    "Our editors independently select the products we write about, and we may earn a commission on purchases.",
    "Copyright {y} by the publisher. All rights reserved. This material may not be republished without permission.",
    "You have reached the limit of free articles for this month. Subscribe now to continue reading without limits.",
    "Click here to read more stories like this one from our team of local reporters and contributors.",
    "Melden Sie sich für unseren Newsletter an und erhalten Sie jeden Morgen die wichtigsten Nachrichten.",
    "Dieser Artikel erschien zuerst in der Printausgabe und wurde für die Online-Ausgabe leicht gekürzt.",
    "Alle Rechte vorbehalten. Die Weiterverbreitung der Inhalte ist ohne vorherige Genehmigung nicht gestattet.",
    "本文仅代表作者本人观点，与本网站无关。未经许可，任何单位和个人不得转载、摘编或以其他方式使用本网站内容。",
    "Related: What we know so far about the story and what happens next, according to officials and experts.",
    "Leave a comment below and let us know what you think about this story and the issues it raises.",
    "Follow us on Facebook, Twitter and Instagram for the latest updates and behind-the-scenes stories.",
]


def _fill(s: str, rng: random.Random) -> str:
    n = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    y = rng.randint(2005, 2024)
    d = rng.choice([f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}, {y}", f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {y}",
                    f"{y}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{y}"])
    return s.format(n=n, d=d, y=y, t=f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                    dd=f"{rng.randint(1, 28)}.{rng.randint(1, 12)}.{y}", zd=f"{y}年{rng.randint(1, 12)}月{rng.randint(1, 28)}日",
                    r=rng.randint(2, 12), c=rng.randint(0, 99))


def pageify(text: str, rng: random.Random, noise: bool = True) -> str:
    """A document as an extractor returns a page: paragraphs of 1-5 sentences, and (with noise) an
    optional title, byline and boilerplate lines. Applied identically to both classes."""
    sents = sentences(text)
    paras, i = [], 0
    while i < len(sents):
        k = rng.randint(1, 5)
        paras.append(" ".join(sents[i:i + k]))
        i += k
    if not noise:
        return "\n".join(paras)
    head, tail = [], []
    if rng.random() < 0.7:  # title: the first words of the text, or of a random sentence
        src = (sents[0] if rng.random() < 0.6 else rng.choice(sents)) if sents else ""
        words = src.split()[: rng.randint(3, 11)]
        title = " ".join(words).rstrip(",.;:")
        head.append(title.title() if rng.random() < 0.5 else title)
    if rng.random() < 0.6:
        head.append(_fill(rng.choice(_BYLINES), rng))
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        (head if rng.random() < 0.4 else tail).append(_fill(rng.choice(_SHORT_BP), rng))
    if rng.random() < 0.3:
        line = _fill(rng.choice(_LONG_BP), rng)
        if rng.random() < 0.5:
            tail.append(line)
        else:
            paras.insert(rng.randint(0, len(paras)), line)
    return "\n".join(head + paras + tail)


def feature_rows(items, rng, copies_pos=1, copies_neg=1, noise=True):
    """(normalized fastText line, prose sample, label, item index) for each page-like variant."""
    out = []
    for idx, it in enumerate(items):
        for _ in range(copies_pos if it["label"] == 1 else copies_neg):
            page = it["text"] if it.get("raw_page") else pageify(it["text"], rng, noise)
            sample = prose_sample(page)
            out.append((normalize(sample), sample, it["label"], idx))
    return out

