"""filters/boilerplate.py: the context-aware boilerplate-line step on real pages, synthetic oracles,
language neutrality, determinism, and its wiring into the quality stage (quality.boilerplate_model)."""

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from extract.html import decode_html, extract_main_text
from extract.records import route
from extract.warc import RawRecord, iter_records
from filters.boilerplate import FEATURES, MODEL_PATH, line_features, load_model, remove_context_boilerplate
from filters.clean import clean_for_rules
from filters.quality import _WIDE_RE
from filters.train_boilerplate import half_of
from tests.warc_factory import MINI

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "data" / "boilerplate"
TRUTH = json.loads((FIXTURES / "ground-truth.json").read_text())

PARAGRAPHS = [
    "The council voted on Tuesday to extend the tram line to the northern suburbs, a project first proposed "
    "more than a decade ago and delayed twice by funding disputes.",
    "Work will begin next spring and is expected to take three years, according to the city's transport "
    "department, which said most of the cost will be covered by a regional grant.",
    "Residents along the route have mixed feelings. Some welcome faster journeys into the centre, while others "
    "worry about noise and the loss of parking spaces on the main road.",
]
MENU = ["Home", "News", "Sport", "Business", "Culture", "Contact"]
TITLE = "Tram line to the northern suburbs approved"


def heads():
    """The shipped head and both half heads (each fitted on one half of the annotated pages)."""
    return {name: load_model(None, name) for name in ("model", "fit_half_0", "fit_half_1")}


def page_text(name: str) -> str:
    html = decode_html(gzip.decompress((FIXTURES / name).read_bytes()), "").text
    return extract_main_text(html).strip()


def lines_of(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def annotated_paragraphs_in(name: str, text: str) -> list[str]:
    """The annotated article paragraphs the extractor's text holds as lines."""
    have = set(lines_of(text))
    body = [p.strip() for p in TRUTH[name]["articleBody"].split("\n") if p.strip()]
    return [p for p in body if p in have]


@pytest.mark.parametrize("head", ["model", "fit_half_0"])
def test_a_real_pages_gallery_and_credits_go_and_every_article_paragraph_stays(head):
    """ctpost.com's AP story (scrapinghub benchmark): the photo gallery's controls go; every annotated
    paragraph and the subheadings between them stay, with the shipped head and with the head fitted
    on the other half of the pages only (it never saw this page)."""
    name = "ctpost-la-auto-show.html.gz"
    assert half_of(TRUTH[name]["url"]) == 1
    text = page_text(name)
    paragraphs = annotated_paragraphs_in(name, text)
    assert len(paragraphs) == 18  # the whole body is in the extractor's text, one line per paragraph
    cleaned, removed = remove_context_boilerplate(text, load_model(None, head))
    kept = lines_of(cleaned)
    assert removed >= 4 and len(kept) == len(lines_of(text)) - removed
    assert all(p in kept for p in paragraphs)
    headings = ("NISSAN SENTRA", "VOLKSWAGEN ID. SPACE VIZZION CONCEPT", "FORD MUSTANG MACH E", "TOYOTA RAV4 PRIME")
    for heading in headings:
        assert heading in kept
    for control in ("Image 1 of 23", "Image 1 of / 23", "Caption", "Close"):
        assert control in lines_of(text) and control not in kept


@pytest.mark.parametrize("head", ["model", "fit_half_0"])
def test_a_real_japanese_pages_menu_goes_and_its_prose_stays(head):
    """A Japanese blog post (scrapinghub benchmark), resiliparse's main content of it: the site menu, phone
    number and "PAGETOP" go; every annotated paragraph stays, including the unpunctuated clause lines of its
    list ("また、その他にも、"). The text's first line, here the menu button's "MENU", always stays (it is a
    page's title as a rule). The extractor's call itself now starts the text at the page's h1, above which
    the menu stands (extract/sandbox.py, HEADLINE_*)."""
    from resiliparse.extract.html2text import extract_plain_text

    from extract import sandbox

    name = "lhpat-tm-trademark-blog.ja.html.gz"
    html = decode_html(gzip.decompress((FIXTURES / name).read_bytes()), "").text
    text = extract_plain_text(html, main_content=True, **sandbox.RESILIPARSE_TEXT_OPTIONS).strip()
    assert lines_of(page_text(name)) == lines_of(text)[lines_of(text).index("商品の改造が商標法違反に！？"):]
    paragraphs = annotated_paragraphs_in(name, text)
    assert len(paragraphs) == 16
    cleaned, removed = remove_context_boilerplate(text, load_model(None, head))
    kept = lines_of(cleaned)
    assert all(p in kept for p in paragraphs)
    assert "また、その他にも、" in kept
    for menu in ("03-5829-8082", "無料相談・お問い合わせ", "PAGETOP"):
        assert menu in lines_of(text) and menu not in kept
    assert lines_of(text)[0] == kept[0] == "MENU"
    assert removed == 5


def test_the_title_and_a_heading_between_paragraphs_stay_and_a_six_line_menu_goes():
    body = PARAGRAPHS[0] + "\n\nConstruction timeline\n\n" + "\n\n".join(PARAGRAPHS[1:])
    text = TITLE + "\n" + "\n".join(MENU) + "\n\n" + body
    for name, head in heads().items():
        cleaned, removed = remove_context_boilerplate(text, head)
        assert removed == 6, name
        assert cleaned == TITLE + "\n\n" + body, name


def test_sentences_long_lines_and_pages_without_candidates_are_never_touched():
    """A line ending in terminal punctuation, one with two sentence ends, one of 200+ columns (Thai writes
    no sentence punctuation) all stay; a page of prose comes back as it was."""
    thai = ("ประเทศไทยมีประวัติศาสตร์อันยาวนานและวัฒนธรรมที่หลากหลาย ผู้คนในแต่ละภูมิภาคมีภาษาถิ่นและประเพณีของตนเอง "
            "อาหารไทยเป็นที่รู้จักไปทั่วโลก ทั้งรสชาติที่กลมกล่อมและการใช้สมุนไพรสดจำนวนมาก นักท่องเที่ยวจำนวนมาก"
            "เดินทางมาเพื่อสัมผัสวิถีชีวิตและธรรมชาติที่งดงาม")
    assert len(thai) >= 200
    cut = "The report was published on Monday. It found that most rivers had improved. But the sampling in"
    prose = "\n\n".join(PARAGRAPHS)
    assert remove_context_boilerplate(prose) == (prose, 0)
    text = "\n".join([TITLE] + MENU + [thai, cut] + MENU[:3])
    cleaned, removed = remove_context_boilerplate(text)
    assert lines_of(cleaned) == [TITLE, thai, cut] and removed == 9
    features, prose_lines = line_features(text.split("\n"))
    assert prose_lines == [False] * 7 + [True, True] + [False] * 3
    assert [f is None for f in features] == [True] + [False] * 6 + [True, True] + [False] * 3  # the title too


def test_a_real_w3c_articles_title_and_the_lines_that_introduce_its_lists_stay():
    """A W3C i18n article (tests/data/interleaved; not a news page, none of which the heads were fitted
    on): its title (the extract's first line) and the lines ending in a colon that introduce its
    examples are never judged, with every head; the heads fitted on news pages had dropped both (a
    headline and a "Read more:" label look alike there)."""
    html = (Path(__file__).parent / "data" / "interleaved" / "qa-indic-graphemes.en.html").read_bytes()
    text = extract_main_text(decode_html(html, "").text).strip()
    title = "Typographic character units in complex scripts"
    intros = [line for line in lines_of(text) if line.endswith(":")]
    assert lines_of(text)[0] == title and len(intros) == 2
    assert intros[0].startswith("The basic unit of text is not always a Unicode code point")
    features, _ = line_features(text.split("\n"))
    judged = {line for line, f in zip(lines_of(text), features) if f is not None}
    assert title not in judged and not judged & set(intros)
    for name, head in heads().items():
        kept = lines_of(remove_context_boilerplate(text, head)[0])
        assert kept[0] == title and all(line in kept for line in intros), name


def test_a_line_with_a_sentence_in_it_and_an_introduction_are_never_judged_and_short_labels_are():
    """Besides prose lines and the lines between two sentences: the first line, a line with a sentence end
    in it that ends without punctuation (a paragraph cut short, a bio line ending in a list), and a line
    of 4 words or more ending in a colon. A label ending in a colon ("Tags:", "Read more:") is judged."""
    lines = [TITLE, "Home", "Work starts in May. Costs are not yet known", "News",
             "Here are the highlights of the plan:", "Tags:", "Read more:", "Sport"]
    features, prose = line_features(lines)
    assert prose == [False] * 8
    assert [f is None for f in features] == [True, False, True, False, True, False, False, False]
    cleaned, _ = remove_context_boilerplate("\n".join(lines + PARAGRAPHS))
    for line in (TITLE, "Work starts in May. Costs are not yet known", "Here are the highlights of the plan:"):
        assert line in lines_of(cleaned)


def test_non_english_pages_keep_their_prose():
    """The German and Chinese human pages of the bundled WARC fixture (real TED text in a page template):
    every line of 60 columns or more stays; only short template lines (title stub, byline, section) go."""
    labels = {json.loads(line)["url"]: json.loads(line) for line in (MINI.parent / "mini.labels.jsonl").open()}
    pages = 0
    for record in iter_records(open(MINI, "rb")):
        if not isinstance(record, RawRecord) or route(record)[0] != "html":
            continue
        label = labels.get(record.url)
        if not label or label["category"] != "human" or label["lang"] not in ("de", "zh"):
            continue
        text = extract_main_text(decode_html(record.payload, record.http_charset).text).strip()
        cleaned, removed = remove_context_boilerplate(text)
        kept = lines_of(cleaned)
        long_lines = [line for line in lines_of(text) if len(line) + len(_WIDE_RE.findall(line)) >= 60]
        assert long_lines and all(line in kept for line in long_lines), record.url
        assert removed <= 4 and len(kept) == len(lines_of(text)) - removed
        pages += 1
    assert pages == 4


def test_only_the_blank_lines_around_a_removed_line_are_merged():
    text = TITLE + "\nHome\nNews\n\n\n" + PARAGRAPHS[0] + "\n\n\n\n" + PARAGRAPHS[1] + "\n\nShare\n\nTweet\n"
    cleaned, removed = remove_context_boilerplate(text)
    assert removed == 4
    assert cleaned == TITLE + "\n\n" + PARAGRAPHS[0] + "\n\n\n\n" + PARAGRAPHS[1]  # 3 blank lines: the page's own


def test_the_step_is_deterministic_across_processes():
    text = page_text("ctpost-la-auto-show.html.gz") + "\n" + "\n".join(MENU)
    expected = hashlib.sha256(remove_context_boilerplate(text)[0].encode()).hexdigest()
    assert remove_context_boilerplate(text) == remove_context_boilerplate(text)
    code = ("import sys, hashlib; from filters.boilerplate import remove_context_boilerplate as r; "
            "print(hashlib.sha256(r(sys.stdin.read())[0].encode()).hexdigest())")
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True,
                             cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == expected


def test_the_shipped_model_file_matches_the_code_and_states_its_held_out_figures():
    model = json.loads(MODEL_PATH.read_text())
    assert tuple(model["features"]) == FEATURES
    for name in ("model", "fit_half_0", "fit_half_1"):
        head = model[name]
        assert tuple(head["features"]) == FEATURES and len(head["coef"]) == len(FEATURES)
        assert -2.5 <= head["threshold"] <= 1.0
    for h in (0, 1):
        held_out = model["metrics"][f"fit_half_{h}"][f"held_out_half_{1 - h}"]
        assert held_out["f1"] > held_out["default"]["f1"] + 0.002  # cleaner than the extractor alone, unseen pages
    with pytest.raises(ValueError, match="features"):
        from filters.boilerplate import LineModel

        LineModel({**model["model"], "features": list(FEATURES[:-1])})


def test_clean_for_rules_and_the_quality_stage_run_the_step_behind_its_flag():
    from filters.quality import QualityConfig
    from pipelines.stages import ApplyQualityRules

    text = "\n".join([TITLE] + MENU) + "\n" + "\n".join(PARAGRAPHS * 2)
    assert clean_for_rules(text, True, True) == (text, {"boilerplate_lines": 0, "link_list_lines": 0})
    cleaned, removed = clean_for_rules(text, True, True, True)
    assert cleaned == "\n".join([TITLE] + PARAGRAPHS * 2) and removed == {
        "boilerplate_model_lines": 6, "boilerplate_lines": 0, "link_list_lines": 0}
    doc = {"id": "a", "text": text, "lang": "en", "scores": {}}
    for enabled in (True, False):
        stage = ApplyQualityRules("quality", QualityConfig(boilerplate_model=enabled, rendering_max_copies=0))
        stage.setup()
        stage.start_bundle()
        out = [o if isinstance(o, dict) else o.value for o in stage.process(doc)][0]
        scores = dict(out["scores"])
        if enabled:
            assert out["text"] == cleaned and scores["boilerplate_model_lines"] == 6
        else:
            assert out["text"] == text and "boilerplate_model_lines" not in scores


def test_the_flag_is_on_by_default_and_documented_in_local_yaml():
    import yaml

    from filters.quality import QualityConfig

    assert QualityConfig().boilerplate_model is True
    assert yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())["quality"]["boilerplate_model"] is True


def test_curate_extract_gives_the_text_the_quality_rules_get_with_the_flag_on_and_off(tmp_path):
    """`curate extract`'s steps (pipelines/extract_pages.py) clean a page as the quality stage does."""
    from pipelines.config import load_config
    from pipelines.extract_pages import TextBranchSteps, html_file_page

    path = str(FIXTURES / "ctpost-la-auto-show.html.gz")
    tiny = str(ROOT / "configs" / "tiny.yaml")
    on = html_file_page(path, TextBranchSteps(load_config(tiny)))
    off = html_file_page(path, TextBranchSteps(load_config(tiny, quality={"boilerplate_model": False})))
    assert on["reason"] is None and off["reason"] is None
    assert on["text"] == clean_for_rules(off["text"], False, False, True)[0] != off["text"]
    assert "Image 1 of 23" in off["text"].split("\n") and "Image 1 of 23" not in on["text"].split("\n")
