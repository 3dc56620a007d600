# Two commands do everything on a fresh machine:
#   make book   build and render the book into _build/html
#   make test   run the whole test suite (what CI runs)
# and one opens the chapters to read and run them:
#   make lab    JupyterLab on chapters/, with the finished package torch_ember installed (chapters 13
#               and 14 use it). Arguments: PORT=8890 IP=0.0.0.0 LAB_ARGS="--no-browser" (any option of
#               `jupyter lab`), e.g. `make lab PORT=8890 IP=0.0.0.0 LAB_ARGS=--no-browser` in a container.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest -p no:cacheprovider -p no:anyio
RUFF := $(VENV)/bin/ruff
RUFF_ARGS := --line-length 110 --target-version py311
EXTENSION_SOURCES := $(shell find extension -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.py' -o -name '*.toml' \) -not -path '*/build/*' -not -path '*.egg-info/*' -not -path 'extension/conformance/*')

.PHONY: book test setup extension lint sync-check execute bench conformance lab clean

# What the package's build needs first (torch and ninja, at requirements.txt's pins): `make test` starts
# compiling the package while the rest installs.
BUILD_REQUIREMENTS = $(shell grep -E '^(torch|ninja|numpy)==' requirements.txt)
$(VENV)/.build-requirements: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# --no-compile: no bytecode for all of torch and Jupyter now; Python writes it for what it imports.
	$(PY) -m pip install --quiet --no-compile $(BUILD_REQUIREMENTS)
	touch $@

$(VENV)/.installed: $(VENV)/.build-requirements
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	# Make `import book` work from the notebooks without installing the book.
	echo "$(CURDIR)" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ember-book.pth"
	touch $@

# The book's JupyterLab extension (labextension/: `%%cpp` cells edited as C++), copied to where JupyterLab
# finds prebuilt extensions in the venv. Handwritten JavaScript: nothing to build, nothing fetched.
LABEXTENSION := $(VENV)/share/jupyter/labextensions/ember-book-lab
$(VENV)/.labextension-installed: $(VENV)/.installed labextension/package.json $(wildcard labextension/static/*)
	rm -rf $(LABEXTENSION)
	mkdir -p $(LABEXTENSION)
	cp -r labextension/package.json labextension/static $(LABEXTENSION)/
	touch $@

setup: $(VENV)/.installed $(VENV)/.labextension-installed

# The package's compiler: Clang where it is installed (a quarter to a third less CPU per file than GCC;
# Clang uses GCC's C++ library and ABI, as the chapters' builds do), else the system's c++.
EXTENSION_CXX ?= $(or $(shell command -v clang++ 2>/dev/null),c++)

$(VENV)/.extension-installed: $(VENV)/.build-requirements $(EXTENSION_SOURCES)
	CXX=$(EXTENSION_CXX) TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -m pip install --quiet --no-build-isolation --no-deps ./extension
	touch $@

extension: $(VENV)/.extension-installed

book: setup
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(VENV)/bin/jupyter-book build . -W --keep-going --builder html

# The book's own tests and the finished extension's tests run in separate
# processes: each loads a PrivateUse1 backend, and a process holds only one.
# The package compiles (ninja; Clang where installed, see EXTENSION_CXX) from the moment torch is
# installed, while the rest of requirements.txt installs (mostly waiting on the disk) and the checks run.
# Then the book's tests and the notebooks (nbval; chapters 13 and 14 use the installed package) run in
# one session of two processes (pytest-xdist, a test file's tests or a notebook's cells in one process,
# each notebook in a kernel of its own), dealt in the order given (--no-loadscope-reorder): the
# notebooks, then the chapters' tests, then the book's many short ones, so that no long file is dealt
# last to leave one core idle at the end. Their cold chapter builds share the caches safely (files are
# written under private names and renamed into place), and a unit or library that one process is
# compiling is not compiled again by the other, which waits for its file (book.builds.toolchain.claim).
# Test files must not depend on which files ran before them in their process (xdist deals them to the
# two processes as they free up).
# Last, the package's tests, then the reader's path: JupyterLab as `make lab` starts it, in which
# headless Chromium runs chapters 02 and 13 through its UI, on copies in a temporary folder. Not beside
# the package's tests: with both cores busy, the browser missed the kernel's websocket pings and the
# server dropped the connection (CI, twice), so Run All never started.
# The slowest tests are listed (--durations): on a cold clone they show where CI's time goes.
# Each test process computes on one OpenMP thread (OMP_NUM_THREADS=1): two processes, each with the
# caller's team and the autograd engine's ember thread's, would oversubscribe 2 cores, and libgomp then
# puts waiting threads to sleep after 100 spins and wakes them for every parallel region (chapter 15b).
# The saved outputs hold on any core count, one included.
test: export OMP_NUM_THREADS = 1
test: $(VENV)/.build-requirements
	$(MAKE) --no-print-directory extension > $(VENV)/extension-build.log 2>&1 & build=$$!; \
	$(MAKE) --no-print-directory setup lint sync-check; checks=$$?; \
	wait $$build || { cat $(VENV)/extension-build.log; exit 1; }; exit $$checks
	EMBER_BOOK_BATCH=1 TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder \
		--durations=20 --nbval chapters --nbval-sanitize-with tests/chapters/sanitize.cfg \
		tests/chapters tests/book --ignore=tests/chapters/test_lab_live.py
	$(PYTEST) -n 2 --dist loadfile --durations=12 tests/package; tests=$$?; \
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PYTEST) tests/chapters/test_lab_live.py; lab=$$?; \
	[ $$tests -eq 0 ] && [ $$lab -eq 0 ]

lint: setup
	$(RUFF) check $(RUFF_ARGS) --select E,F,W,I,UP,B --ignore E501 book tests extension
	$(RUFF) format --check $(RUFF_ARGS) book tests extension
	# The chapters' Python is formatted to the rendered page's 88 columns (tests/chapters/test_outputs.py checks the rest).
	$(RUFF) format --check --line-length 88 --target-version py311 $(wildcard chapters/*.ipynb)

sync-check: setup
	$(PY) -m book.sync --check

# The book's processes keep the installed torch_ember from autoloading on `import torch` (a process holds
# one PrivateUse1 backend, and the book builds its own): TORCH_DEVICE_BACKEND_AUTOLOAD=0. `import book`
# sets it too, for itself and its children, and refuses if torch_ember was loaded first.
# Re-execute chapters (all, or CHAPTERS="chapters/02_minimal_ops.ipynb") and save their outputs.
execute: setup extension
	EMBER_BOOK_BATCH=1 TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -m book.execute $(CHAPTERS)

# The book's compile benchmark, the simulated driver's costs, then the finished backend's operators.
bench: setup extension
	$(PY) -m book.bench
	$(PY) extension/bench/driver_bench.py
	$(PY) -m torch_ember.bench

# After a kernel change: sweep PyTorch's OpInfo database again (ember against the CPU) and rewrite the
# summary chapter 14 reads and the strict expected-failures file the package's tests check; then the
# stride sweep (ember's sizes and strides against FakeTensor's), its summary and expected differences.
conformance: setup extension
	$(PY) extension/conformance --json extension/conformance/opinfo_summary.json --write-expected extension/conformance/opinfo_expected_failures.toml
	$(PY) extension/conformance --strides --json extension/conformance/strides_summary.json --write-expected extension/conformance/strides_expected.toml

# JupyterLab for a reader: `make lab [PORT=8890] [IP=0.0.0.0] [LAB_ARGS="..."]`. It needs the installed
# package (chapters 13 and 14 import torch_ember; the chapters' kernels still build their own backend,
# autoload off). Containers often run as root, which JupyterLab refuses without --allow-root.
PORT ?=
IP ?=
LAB_ARGS ?=
LAB_COMMAND = $(VENV)/bin/jupyter lab chapters/ $(if $(PORT),--port=$(PORT)) $(if $(IP),--ip=$(IP)) \
	$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)
lab: setup extension
	EMBER_BOOK_BATCH=0 TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(LAB_COMMAND)

clean:
	rm -rf _build
