# All set-up lives here so that a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test build deps cargo-test pytest bench clean asan

$(VENV)/.deps-stamp: requirements.txt requirements-ray.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	# The optional `ray` extra, so tests/test_ray_carrier.py runs here and in CI.
	$(VPY) -m pip install --quiet -r requirements-ray.txt
	touch $@

deps: $(VENV)/.deps-stamp

build: deps
	$(VENV)/bin/maturin develop --release --quiet

demo: build
	$(VPY) examples/demo.py

cargo-test:
	cargo test -p strideweave-core --release --quiet

pytest: build
	$(VPY) -m pytest -q

test: build cargo-test pytest

bench: build
	$(VPY) benches/run_all.py

clean:
	rm -rf $(VENV) target
