"""The compiled page-object walk and per-character layout of PDF pages (extract/_pdflines.c) against
their Python oracles (extract/pdf.py page_objects_python, char_codes_python, visible_glyphs_python,
group_chars_python, line_boxes_python): the same lists on random glyph streams and on real pages, and
the same parse of real PDFs with either."""

import math
import random
from pathlib import Path

import pytest

from extract import pdf
from extract.pdf import (LINE_SPLIT_GAP, NEWLINE_CONTINUE_GAP, SPACE_GAP, _NEWLINE_WEIGHT, _handle,
                         char_codes_python, group_chars_python, line_boxes_python, page_objects_python,
                         parse_pdf, visible_glyphs_python)

DATA = Path(__file__).parent / "data" / "pdf"
CONSTANTS = (_NEWLINE_WEIGHT, LINE_SPLIT_GAP, NEWLINE_CONTINUE_GAP, SPACE_GAP)


def compiled():
    from extract import _pdflines  # built by `pip install -e .` (setup.py); make setup builds it

    return _pdflines.group_chars


def test_the_pdf_parser_uses_the_compiled_layout():
    assert pdf.group_chars is compiled()
    assert pdf.char_codes is not char_codes_python and pdf.visible_glyphs is not visible_glyphs_python
    assert pdf.page_objects is not page_objects_python and pdf.line_boxes is not line_boxes_python


def test_real_pages_give_the_oracle_s_codes_and_boxes():
    import pypdfium2 as pdfium

    checked = 0
    for path in sorted(DATA.glob("*.pdf")):
        try:
            doc = pdfium.PdfDocument(path.read_bytes())
        except pdfium.PdfiumError:
            continue
        for i in range(min(len(doc), 3)):
            pdf_page = doc[i]  # held: the handle is freed with it
            page = _handle(pdf_page.raw)
            for m in ((1.0, 0.0, 0.0, 1.0), (0.0, 1.0, -1.0, 0.0), (1.0, 0.7, 0.0, 1.0)):
                for check in (True, False):
                    assert pdf.page_objects(page, False, m, check) == page_objects_python(page, False, m, check)
            objects, kinds, _ = pdf.page_objects(page, False, (1.0, 0.0, 0.0, 1.0), True)
            for form in (o for o, k in zip(objects, kinds) if k == 5):  # FPDF_PAGEOBJ_FORM
                form = _handle(form)
                assert pdf.page_objects(form, True, (1.0, 0.0, 0.0, 1.0), True) == \
                    page_objects_python(form, True, (1.0, 0.0, 0.0, 1.0), True)
            textpage = pdf_page.get_textpage()
            handle, n = _handle(textpage.raw), textpage.count_chars()
            codes = pdf.char_codes(handle, n)
            assert codes == char_codes_python(handle, n)
            indices = list(range(n)) + [n, n + 5]  # past the end: PDFium finds no box
            for visible in (pdf_page.get_bbox(), (0.0, 0.0, 300.0, 400.0), (0, 0, 0, 0)):
                kept = pdf.visible_glyphs(handle, indices, visible)
                assert kept == visible_glyphs_python(handle, indices, visible)
            checked += n
            textpage.close()
        doc.close()
    assert checked > 1000


def glyph_stream(rng: random.Random, n: int) -> tuple[list, ...]:
    """Glyphs along lines of text with the things real pages have: line and column jumps, spaces and
    PDFium's line breaks, superscripts, rotated runs, repeated and empty boxes, odd values."""
    f0, f1, f2, f3, quarters, steps = [], [], [], [], [], []
    x, y, size, q = 0.0, 700.0, 10.0, 0
    for _ in range(n):
        r = rng.random()
        if r < 0.05:  # a new line
            x, y = rng.choice([0.0, 300.0, rng.uniform(-50, 600)]), y - size * rng.uniform(0.8, 2.5)
        elif r < 0.08:  # a column gap or a jump back
            x += rng.choice([size * 5, -size * 3, rng.uniform(-200, 200)])
        elif r < 0.1:
            size = rng.choice([6.0, 10.0, 12.0, 24.0])
        elif r < 0.11:
            q = rng.choice([0, 0, 0, 1, 2, 3])
        width = size * rng.uniform(0.2, 0.7)
        lift = size * 0.4 if rng.random() < 0.03 else 0.0  # a superscript
        box = [x, y + lift, x + width, y + lift + size]
        if rng.random() < 0.01:
            box = rng.choice([[x, y, x, y], [x, y + size, x + width, y], [math.nan, y, x, y + size],
                              [x, -math.inf, x + width, math.inf], [0, 0, 0, 0]])
        for values, v in zip((f0, f1, f2, f3), box):
            values.append(float(v))
        quarters.append(q)
        steps.append(rng.choice([0] * 8 + [1, 2, _NEWLINE_WEIGHT, _NEWLINE_WEIGHT + 1, 3 * _NEWLINE_WEIGHT]))
        x += width if rng.random() < 0.97 else 0.0  # a ligature's code points share one box
    return f0, f1, f2, f3, quarters, steps


@pytest.mark.parametrize("seed", range(60))
def test_random_glyph_streams_give_the_oracle_s_lists(seed):
    rng = random.Random(seed)
    stream = glyph_stream(rng, rng.choice([0, 1, 2, 50, 2000]))
    assert compiled()(*stream, *CONSTANTS) == group_chars_python(*stream, *CONSTANTS)


@pytest.mark.parametrize("seed", range(20))
def test_line_boxes_are_the_oracle_s(seed):
    rng = random.Random(seed)
    f0, f1, f2, f3, quarters, steps = glyph_stream(rng, rng.choice([1, 2, 50, 2000]))
    for values in (f0, f1, f2, f3):  # ties and signed zeros: min() and max() keep the first of equal values
        for i in rng.sample(range(len(values)), len(values) // 10):
            values[i] = rng.choice([0.0, -0.0, 1.5, math.nan])
    starts, _, _ = compiled()(f0, f1, f2, f3, quarters, steps, *CONSTANTS)
    got, want = pdf.line_boxes(f0, f1, f2, f3, starts, len(f0)), line_boxes_python(f0, f1, f2, f3, starts, len(f0))
    assert [[repr(v) for v in box] for box in got] == [[repr(v) for v in box] for box in want]


def test_real_pdfs_parse_the_same_with_either(monkeypatch):
    files = sorted(DATA.glob("*.pdf"))
    assert files
    parsed = [parse_pdf(f.read_bytes()) for f in files]
    monkeypatch.setattr(pdf, "group_chars", group_chars_python)
    monkeypatch.setattr(pdf, "char_codes", char_codes_python)
    monkeypatch.setattr(pdf, "visible_glyphs", visible_glyphs_python)
    monkeypatch.setattr(pdf, "page_objects", page_objects_python)
    monkeypatch.setattr(pdf, "line_boxes", line_boxes_python)
    assert parsed == [parse_pdf(f.read_bytes()) for f in files]
    assert sum(p["pages"] for p in parsed) > 5 and any(n["type"] == "text" for p in parsed for n in p["nodes"])


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        compiled()([1.0], [1.0], [1.0], ["x"], [0], [0], *CONSTANTS)
    with pytest.raises(ValueError):
        compiled()([], [], [], [], [], [], 0, 2.0, 0.5, 0.15)
    with pytest.raises(ValueError):
        pdf.line_boxes([1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1, 0], 2)
