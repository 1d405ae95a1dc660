# Two entry points on a fresh machine: `make test` and `make demo`. Each sets itself up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
CONFIG  ?= configs/fashion_mnist.toml
WORKDIR ?= runs/demo
FMNIST  := /usr/share/datasets/fashion-mnist

.PHONY: test test-slow demo venv data bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Two workers, one test file each at a time (module fixtures stay shared within a file; the tiny
# runs of tests/conftest.py are built once for both workers, under a file lock in the session's temp folder):
# the suite is mostly single-threaded (XLA compiles, numpy loops). Its size and time: docs/development.md.
# Plain `pytest` (no -n) still works where pytest-xdist is not installed.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

data:
	@if [ -f $(FMNIST)/train-images-idx3-ubyte.gz ] || [ -n "$$PATE_DATA_DIR" ]; then \
	  echo "Fashion-MNIST: found"; \
	else \
	  echo "Fashion-MNIST: installing Debian package dataset-fashion-mnist"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  ($$SUDO apt-get install -y dataset-fashion-mnist || \
	   ($$SUDO apt-get update && $$SUDO apt-get install -y dataset-fashion-mnist)) >/dev/null; \
	fi

demo: $(STAMP) data
	$(BIN)/pate run --config $(CONFIG) --workdir $(WORKDIR)

clean:
	rm -rf $(VENV) runs .pytest_cache
