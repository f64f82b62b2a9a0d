# All set-up lives here so that a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
# pyright (PyPI) ships its JavaScript and runs it on the system's node; never ask the network
# whether a newer pyright exists.
export PYRIGHT_PYTHON_IGNORE_WARNINGS := 1
export PYRIGHT_PYTHON_GLOBAL_NODE := 1
# `make wheel`: a stripped, manylinux_2_28 release wheel (cargo profile `dist`, zig linker).
WHEEL_DIR := target/wheels
TYPED := examples tests/typing

.PHONY: demo test build deps demo-deps cargo-test rust-checks pytest typecheck wheel wheel-test bench bench-quick bench-rust \
	clean asan test-interop interop-deps

$(VENV)/.venv-stamp:
	@echo "==> creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	touch $@

$(VENV)/.demo-stamp: requirements-demo.txt $(VENV)/.venv-stamp
	@echo "==> installing what the demo needs (requirements-demo.txt: maturin, numpy)"
	$(VPY) -m pip install --quiet -r requirements-demo.txt
	touch $@

$(VENV)/.deps-stamp: requirements-test.txt requirements-demo.txt requirements-ray.txt requirements-pycute.txt $(VENV)/.venv-stamp
	@echo "==> installing the test tools (requirements-test.txt)"
	$(VPY) -m pip install --quiet -r requirements-test.txt
	@echo "==> installing pycute, the CuTe reference (requirements-pycute.txt, without CUTLASS's emitter dependencies)"
	$(VPY) -m pip install --quiet --no-deps -r requirements-pycute.txt
	@echo "==> installing the optional ray extra (requirements-ray.txt), so the Ray carrier's tests run"
	$(VPY) -m pip install --quiet -r requirements-ray.txt
	touch $@

demo-deps: $(VENV)/.demo-stamp

deps: $(VENV)/.deps-stamp

build: deps
	$(VENV)/bin/maturin develop --release --quiet

demo: demo-deps
	@echo "==> building the extension in release mode (the first build takes a few minutes)"
	$(VENV)/bin/maturin develop --release --quiet
	@echo "==> running examples/demo.py"
	$(VPY) examples/demo.py

cargo-test:
	cargo test -p strideweave-core --release --quiet

# The Rust crates' hygiene, enforced (issue 25): formatting, clippy on every target of the
# workspace (the binding builds against the venv's Python), the core's rustdoc with every
# public item documented, and a crate outside the workspace that builds against the core by
# path with no warning (crates/strideweave-core/standalone_check.sh).
rust-checks: $(VENV)/.venv-stamp
	cargo fmt --all --check
	PYO3_PYTHON=$(abspath $(VPY)) cargo clippy --workspace --all-targets --quiet -- -D warnings
	cargo clippy -p strideweave-core --no-default-features --all-targets --quiet -- -D warnings
	RUSTDOCFLAGS="-D missing_docs -D warnings" cargo doc -p strideweave-core --no-deps --quiet
	crates/strideweave-core/standalone_check.sh

pytest: build
	$(VPY) -m pytest -q

# The package and the benches with mypy (settings in pyproject.toml), the stub of the compiled module against
# the built extension, user-side code with mypy --strict and pyright, and the public API's
# type completeness.
typecheck: build
	$(VPY) -m mypy -p strideweave
	$(VPY) -m mypy benches
	$(VPY) -m mypy.stubtest strideweave --mypy-config-file pyproject.toml
	$(VPY) -m mypy --strict --config-file= $(TYPED)
	$(VENV)/bin/pyright $(TYPED)
	$(VPY) tests/typing/verify_completeness.py 0.95

wheel: deps
	rm -rf $(WHEEL_DIR)
	$(VENV)/bin/maturin build --profile dist --zig --compatibility manylinux_2_28 --out $(WHEEL_DIR)

# Installs the wheel into a fresh venv (no build tools, no source tree on the path) and runs
# the demo there.
wheel-test: wheel
	$(VPY) tests/wheel/install_and_run.py $(WHEEL_DIR)

test: build rust-checks cargo-test pytest typecheck bench-quick wheel-test

bench: build
	$(VPY) benches/run_all.py

# Every bench once with --quick (seconds each), so a bench cannot break unnoticed. It fails
# only when a bench fails to run; nothing asserts on time.
bench-quick: build
	$(VPY) benches/run_all.py --quick

# criterion benchmarks of the Rust core API (a crate of their own, never built by make test)
bench-rust:
	cargo bench -p strideweave-bench

# Third-party consumers (PyTorch). torch is large (its default PyPI wheel pulls CUDA
# libraries, about 4 GB, but runs on CPU), so it lives in its own pinned requirements file
# and only this target installs it.
$(VENV)/.interop-stamp: requirements-interop.txt $(VENV)/.deps-stamp
	@echo "==> installing PyTorch from requirements-interop.txt (large download, once per venv)"
	$(VPY) -m pip install --quiet -r requirements-interop.txt
	touch $@

interop-deps: $(VENV)/.interop-stamp

test-interop: build interop-deps
	$(VPY) -m pytest -q -rs tests/interop

clean:
	rm -rf $(VENV) target
