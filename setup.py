# Beam's --setup_file builds an sdist from this; all other metadata lives in pyproject.toml.
# The compiled hot paths: each has a Python implementation that is its test oracle and its fallback, so a
# machine without a C compiler still installs (optional=True) and runs, slower. No fused multiply-adds: the
# compiled arithmetic rounds as Python's does.
from setuptools import Extension, setup

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O2", "-ffp-contract=off"])
                   for name, source in (("filters._ngrams", "filters/_ngrams.c"), ("filters._words", "filters/_words.c"),
                                        ("filters._boilerplate", "filters/_boilerplate.c"),
                                        ("extract._pdflines", "extract/_pdflines.c"),
                                        ("packing._pieces", "packing/_pieces.c"))])
