# All set-up lives here so that a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test build deps cargo-test pytest bench bench-rust clean asan test-interop interop-deps

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

# criterion benchmarks of the Rust core API (a crate of their own, never built by make test)
bench-rust:
	cargo bench -p strideweave-bench

# Third-party consumers (PyTorch). torch is large (its default PyPI wheel pulls CUDA
# libraries, about 4 GB, but runs on CPU), so it lives in its own pinned requirements file
# and only this target installs it.
$(VENV)/.interop-stamp: requirements-interop.txt $(VENV)/.deps-stamp
	@echo "installing PyTorch from requirements-interop.txt (large download, once per venv)"
	$(VPY) -m pip install --quiet -r requirements-interop.txt
	touch $@

interop-deps: $(VENV)/.interop-stamp

test-interop: build interop-deps
	$(VPY) -m pytest -q -rs tests/interop

clean:
	rm -rf $(VENV) target
