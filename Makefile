# Two commands for a fresh machine: `make demo` and `make test`. Each sets up what it needs.
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# On a GPU machine the system python already holds a CUDA torch and triton: `make test-gpu`
# uses the venv when there is one and that python otherwise, so it never replaces them.
GPU_PY ?= $(shell test -x $(VPY) && echo $(VPY) || echo $(PYTHON))

.PHONY: setup test test-gpu demo lint clean

setup: $(STAMP)

# --system-site-packages lets a machine's own CUDA torch show through; only where no torch is
# importable do we install the CPU build (torch==2.13.0; an unpinned torch pulls a CUDA build of GBs).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q --progress-bar off "torch==2.13.0"
	$(VPY) -m pip install -q --progress-bar off -e ".[dev]"
	touch $(STAMP)

test: setup
	$(VPY) -m pytest -m "not gpu" -q

test-gpu:
	ATTN_TEST_GPU=1 $(GPU_PY) -m pytest -m gpu -q -p no:cacheprovider tests/gpu

demo: setup
	$(VPY) -m profiler capture --seq 8192

lint: setup
	$(VPY) -m ruff check attention_core kernels profiler tests dashboards scripts examples

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
