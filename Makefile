# Two entry points (README): `make run` and `make test`. Both create .venv and install the pinned
# dependencies first, so each works on a fresh clone.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/curate run $(ARGS)

test: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests

bench: setup
	$(BIN)/python benchmarks/extract_throughput.py
	$(BIN)/python benchmarks/packing.py --n 1000000

clean:
	rm -rf out .pytest_cache
