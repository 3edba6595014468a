# translator: install, test, lint, demo, bench.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DATA   ?=
CONFIG ?= configs/tiny.yaml
export HF_HUB_DISABLE_TELEMETRY := 1

.PHONY: install bench-install test cuda-check lint demo bench bench-model bench-train bench-decode bench-launches bench-prepare tensorboard clean

install:  ## venv with torch pinned first (TORCH_INDEX=URL picks its build), then the package with dev extras
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e '.[dev]'
	@# headless browser for the attention page's test, where apt runs as root (else that test skips)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || true; fi

bench-install: install  ## peers for benchmarks, kept from moving torch
	$(BIN)/pip freeze | grep -i '^torch==' > $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[bench]'

test:  ## the whole suite (CPU; CUDA tests skip without a GPU)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -q

cuda-check:  ## on a machine with a CUDA GPU: the CUDA tests, then the CUDA halves of the benchmarks
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest -q -m cuda -p no:cacheprovider
	$(BIN)/python -m bench.decode --cpu-dtypes ''
	$(BIN)/python -m bench.model --device cuda --out docs/benchmarks/model-cuda.md
	$(BIN)/python -m bench.train --device cuda --out docs/benchmarks/train-cuda.md

lint:
	$(BIN)/ruff check translator tests bench

# The main job end to end: prepare -> train -> eval -> translate with $(CONFIG).
# DATA=../shared/data/multi30k uses local files (train, valid, test2016); without it, the hub copy.
ifeq ($(DATA),)
DATA_ARGS :=
else
DATA_ARGS := --data $(DATA) --set data.splits.valid=valid --set data.splits.test=test2016
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
endif
SAMPLE := A man in a blue shirt is playing the guitar on a stage.
RUN_DIR = $(shell $(BIN)/python -c "from translator import config; print(config.load('$(CONFIG)').train.run_dir)")

demo:
	$(BIN)/translator prepare $(CONFIG) $(DATA_ARGS)
	$(BIN)/translator train $(CONFIG) $(DATA_ARGS)
	$(BIN)/translator eval $(RUN_DIR)/best.pt --split test
	@echo "source:      $(SAMPLE)"
	@printf 'translation: '; echo "$(SAMPLE)" | $(BIN)/translator translate $(RUN_DIR)/best.pt

# Speed and memory benchmarks; each writes docs/benchmarks/<name>.md (see docs/benchmarks.md).
bench: bench-model bench-train bench-decode bench-launches

bench-model:
	$(BIN)/python -m bench.model

bench-train:
	$(BIN)/python -m bench.train

bench-decode:  ## needs `make bench-install` for the Hugging Face peer
	$(BIN)/python -m bench.decode --repeats 2  # the machine drifts: two interleaved passes, per-pass ratios printed

bench-launches:  ## needs `make bench-install`; host launches per decoding step on the CUDA path, counted on CPU
	$(BIN)/python -m bench.launches

bench-prepare:  ## ~7 minutes; builds a 4.5M-pair corpus under /tmp
	$(BIN)/python -m bench.prepare

tensorboard:
	$(BIN)/tensorboard --logdir runs

clean:
	rm -rf runs .pytest_cache .ruff_cache
