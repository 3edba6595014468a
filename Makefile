# translator: install, test, lint, demo, bench.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DATA   ?=
CONFIG ?= configs/tiny.yaml
export HF_HUB_DISABLE_TELEMETRY := 1

# Marks a finished install; rebuilt when pyproject.toml (the dependencies) or this file changes.
# Every target that runs the package depends on it, so `make test` or `make demo` sets itself up.
STAMP  := $(VENV)/.installed

.PHONY: FORCE help install test cuda-check lint format demo multi30k bench bench-model bench-train bench-decode bench-launches bench-prepare bench-attention-options tensorboard clean
.DEFAULT_GOAL := help

help:  ## this list (`make TARGET`; variables such as DATA=, DIR=, TORCH_INDEX= are in the Makefile)
	@awk -F ':.*## ' '/^[a-zA-Z0-9_-]+:.*## / {printf "  %-24s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: $(STAMP)  ## only the set-up (`rm .venv/.installed` first to redo it)

# TORCH_INDEX is sticky: the index of the last install, recorded in $(TORCH_INDEX_FILE), is kept
# by every later command that does not give one (`make test` keeps the CPU build), also when
# pyproject.toml changes; only a given, different one (`TORCH_INDEX=` for pip's default index)
# reinstalls torch (pip takes any installed 2.13.0 build as satisfying torch==2.13.0, so it is
# forced to replace it).
TORCH_INDEX_FILE := $(VENV)/torch-index
RECORDED_INDEX := $(shell cat $(TORCH_INDEX_FILE) 2>/dev/null)
ifeq ($(origin TORCH_INDEX),undefined)
TORCH_INDEX := $(RECORDED_INDEX)
endif
# rewritten only when missing or changed, so that a finished install is a no-op (`make -n` too)
ifneq ($(TORCH_INDEX),$(RECORDED_INDEX))
$(TORCH_INDEX_FILE): FORCE
endif
$(TORCH_INDEX_FILE):
	@mkdir -p $(VENV)
	@echo '$(TORCH_INDEX)' > $@
FORCE:

# The test install includes the peers (transformers, ctranslate2: the `bench` extra) so that the
# interop tests run; the constraint keeps pip from replacing the pinned torch while resolving them.
$(STAMP): pyproject.toml Makefile $(TORCH_INDEX_FILE)  ## venv with torch pinned first (TORCH_INDEX=URL picks its build), then the package with dev and bench extras
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
		echo "error: $(PYTHON) is not Python 3.10 or newer, which translator needs (give one: make install PYTHON=python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) \
		$$(test -e $(TORCH_INDEX_FILE).installed && ! cmp -s $(TORCH_INDEX_FILE) \
			$(TORCH_INDEX_FILE).installed && echo --force-reinstall)
	cp $(TORCH_INDEX_FILE) $(TORCH_INDEX_FILE).installed
	$(BIN)/pip freeze | grep -i '^torch==' > $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[dev,bench]'
	@# headless browser for the attention page's test, where apt runs as root (else that test skips)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 || true; fi
	touch $@

# one worker per logical CPU (pytest-xdist; "auto" would count physical cores where psutil is
# installed): each test runs on one torch thread (tests/conftest.py)
test: $(STAMP)  ## the whole suite, one process per core (CPU; CUDA tests skip without a GPU)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -q -n logical

cuda-check: $(STAMP)  ## on a machine with a CUDA GPU: the CUDA tests, then the CUDA halves of the benchmarks
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -q -m cuda -p no:cacheprovider
	$(BIN)/python -m bench.decode --cpu-dtypes ''
	$(BIN)/python -m bench.model --device cuda --out docs/benchmarks/model-cuda.md
	$(BIN)/python -m bench.train --device cuda --out docs/benchmarks/train-cuda.md

lint: $(STAMP)  ## ruff check and ruff format --check
	$(BIN)/ruff check translator tests bench
	$(BIN)/ruff format --check translator tests bench

format: $(STAMP)  ## ruff format, and ruff check's safe fixes
	$(BIN)/ruff format translator tests bench
	$(BIN)/ruff check --fix translator tests bench

# The main job end to end: train (which prepares the data first) -> eval -> translate with $(CONFIG).
# DATA=../shared/data/multi30k uses local files (train, valid, test2016); without it, the hub copy.
ifeq ($(DATA),)
DATA_ARGS :=
else
DATA_ARGS := --data '$(DATA)' --set data.splits.valid=valid --set data.splits.test=test2016
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
endif
SAMPLE := A man in a blue shirt is playing the guitar on a stage.
# Read when the recipe runs (after the install), not when make parses this file.
RUN_DIR = $$($(BIN)/python -c "from translator import config; print(config.load('$(CONFIG)').train.run_dir)")

demo: $(STAMP)  ## train, eval and translate with CONFIG (DATA=../shared/data/multi30k: local files)
	$(BIN)/translator train $(CONFIG) $(DATA_ARGS)
	$(BIN)/translator eval "$(RUN_DIR)/best.pt" --split test
	@echo "source:      $(SAMPLE)"
	@printf 'translation: '; echo "$(SAMPLE)" | $(BIN)/translator translate -q "$(RUN_DIR)/best.pt"

# One results row of the Multi30k recipe (issue 17; python -m translator.recipe -h): prepare, train
# for BUDGET minutes of wall-clock (training and averaging count; preparing and scoring do not),
# average the newest AVERAGE checkpoints, keep the average or best.pt by valid BLEU, score test2016
# once (sacreBLEU and lowercased tokenized BLEU), then scores.txt and recipe.json (the manifest) in
# runs/multi30k-$(DIR)/. DIR=en-de or de-en picks configs/multi30k-$(DIR).yaml; ARGS adds options,
# e.g. a smoke test: BUDGET=2 ARGS="--set train.run_dir=runs/smoke --set train.eval_every=10".
DIR     ?= en-de
BUDGET  ?= 48
# AVERAGE: checkpoints to average, chosen on valid (docs/experiments.md): en->de decodes its
# moving average of the weights (train.ema_decay) as it is; so does de->en since 2026-12-04
AVERAGE_en-de := 1
AVERAGE_de-en := 1
AVERAGE ?= $(AVERAGE_$(DIR))
# MEMBERS: models trained side by side within the budget (the CPU threads split between them) and
# decoded as one ensemble; 1: a single model. en->de: 2, chosen on valid (docs/experiments.md)
MEMBERS_en-de := 2
MEMBERS_de-en := 2
MEMBERS ?= $(MEMBERS_$(DIR))
# FP32: where training runs in fp32 (a CPU without native bf16), about half the updates fit the
# budget (~3,000 a member): there one model with dropout 0.1 scored higher on valid than the
# ensemble in both directions (docs/experiments.md, "An ensemble of two"), so the recipe switches
# to it. FP32= (empty) keeps the settings above on any machine.
FP32_en-de := --fp32-members 1 --fp32-set model.dropout=0.1 \
	--fp32-set model.attention_dropout=0 --fp32-set train.weight_decay=0
FP32_de-en := --fp32-members 1 --fp32-set model.dropout=0.1
FP32 ?= $(FP32_$(DIR))
# An unknown DIR is refused before anything runs (else `--average  --members` come out empty).
MULTI30K_CONFIG := configs/multi30k-$(DIR).yaml
ifneq ($(filter multi30k,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(MULTI30K_CONFIG)),)
$(error DIR=$(DIR): no $(MULTI30K_CONFIG) (DIR is one of: $(patsubst configs/multi30k-%.yaml,%,$(wildcard configs/multi30k-*.yaml))))
endif
ifeq ($(strip $(AVERAGE)),)
$(error DIR=$(DIR): no AVERAGE chosen for it in the Makefile (give AVERAGE=N and MEMBERS=N))
endif
ifeq ($(strip $(MEMBERS)),)
$(error DIR=$(DIR): no MEMBERS chosen for it in the Makefile (give MEMBERS=N))
endif
endif
multi30k: $(STAMP)  ## one results row of the Multi30k recipe (DIR=en-de or de-en, BUDGET=, ARGS=)
	$(BIN)/python -m translator.recipe $(MULTI30K_CONFIG) $(DATA_ARGS) \
		--budget $(BUDGET) --average $(AVERAGE) --members $(MEMBERS) $(FP32) $(ARGS)

# Speed and memory benchmarks; each writes docs/benchmarks/<name>.md (see docs/benchmarks.md).
bench: bench-model bench-train bench-decode bench-launches  ## bench-model, bench-train, bench-decode and bench-launches

bench-model: $(STAMP)  ## model speed and memory
	$(BIN)/python -m bench.model

bench-train: $(STAMP)  ## training step speed and memory
	$(BIN)/python -m bench.train

# Ours, HF generate and CTranslate2 (ours exported), fp32 and int8 (+ bf16 where the CPU has it),
# beam 4 and greedy; two interleaved passes (the machine drifts), per-pass ratios and peak memory;
# adds a dated section to docs/benchmarks/decode.md.
bench-decode: $(STAMP)  ## with the Hugging Face and CTranslate2 peers (installed by the stamp)
	$(BIN)/python -m bench.decode --repeats 2

bench-launches: $(STAMP)  ## host launches per decoding step on the CUDA path, counted on CPU
	$(BIN)/python -m bench.launches

bench-attention-options: $(STAMP)  ## hours: the 48-min multi30k recipe per attention option (MINUTES=, ARGS=)
	$(BIN)/python -m bench.attention_options $(if $(MINUTES),--minutes $(MINUTES)) $(ARGS)

bench-prepare: $(STAMP)  ## ~7 minutes; builds a 4.5M-pair corpus under /tmp
	$(BIN)/python -m bench.prepare

tensorboard: $(STAMP)  ## TensorBoard on runs/
	$(BIN)/tensorboard --logdir runs

clean:  ## remove runs/ and the caches
	rm -rf runs .pytest_cache .ruff_cache .hypothesis
