"""Measures packing/pieces_classes.txt, the class of every code point that packing/_pieces.c's scanner of the
DeepSeek-V3 pre-tokenizer reads, from the tokenizer's own regexes:

    python -m packing.pieces_classes [TOKENIZER]   # default: deepseek-v3 (a few minutes)
"""

from __future__ import annotations

import json
import os
import sys

from packing.pieces import CLASSES_FILE, LETTER, NUMBER, OTHER, PRE_TOKENIZER, PUNCT, SPACE
from packing.tokenizer import DEFAULT_TOKENIZER, resolve_tokenizer_file


def measure_classes(tokenizer_json: str, code_points=range(0x110000)) -> bytes:
    """Each code point's class as the tokenizer's own three splits treat it (0 for those not in
    `code_points`), probed by pre-tokenizing it beside characters of known class (a CJK code point beside
    Kana, which split 2 keeps together)."""
    from tokenizers import Tokenizer

    with open(tokenizer_json, encoding="utf-8") as fh:
        pre = json.load(fh)["pre_tokenizer"]
    if pre != PRE_TOKENIZER:
        raise ValueError(f"{tokenizer_json} does not have DeepSeek-V3's pre-tokenizer")
    splits = dict(pre, pretokenizers=pre["pretokenizers"][:3])
    probe = Tokenizer.from_str(json.dumps({"version": "1.0", "pre_tokenizer": splits, "model": {
        "type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}})).pre_tokenizer

    def together(text: str) -> bool:
        return len(probe.pre_tokenize_str(text)) == 1

    table = bytearray(0x110000)
    for cp in code_points:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if 0x4E00 <= cp <= 0x9FA5 or 0x3040 <= cp <= 0x30FF:
            table[cp] = LETTER if together("ア" + c) else PUNCT if together("・" + c) else OTHER
        elif together("1" + c):
            table[cp] = NUMBER
        elif together("a" + c):
            table[cp] = LETTER
        elif c not in "\r\n" and together("!" + c):
            table[cp] = PUNCT
        elif together(c + "\n"):
            table[cp] = SPACE
    return bytes(table)


def write_classes(table: bytes, path: str = CLASSES_FILE, source: str = "") -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(f"# packing/_pieces.c's class of each code point (0 other, 1 letter or mark, 2 number, 3 punctuation\n"
                 f"# or symbol, 4 whitespace) from this code point up to the next line's; written by\n"
                 f"# `python -m packing.pieces_classes` from {source}\n")
        for cp in range(0x110000):
            if cp == 0 or table[cp] != table[cp - 1]:
                fh.write(f"{cp:x} {table[cp]}\n")


def main(argv: list[str]) -> None:
    import importlib.metadata

    path = resolve_tokenizer_file(argv[0] if argv else DEFAULT_TOKENIZER)
    write_classes(measure_classes(path), source=f"{os.path.basename(os.path.dirname(path))}/tokenizer.json, "
                  f"tokenizers {importlib.metadata.version('tokenizers')}")


if __name__ == "__main__":
    main(sys.argv[1:])
