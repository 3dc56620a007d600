# Two commands do everything on a fresh machine:
#   make book   build and render the book into _build/html
#   make test   run the whole test suite (what CI runs)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export EMBER_BOOK_BATCH := 1

.PHONY: book test setup lint sync-check execute bench lab clean

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# Make `import book` work from the notebooks without installing the book.
	echo "$(CURDIR)" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ember-book.pth"
	touch $@

setup: $(VENV)/.installed

book: setup
	$(VENV)/bin/jupyter-book build . -W --keep-going --builder html

test: setup lint sync-check
	$(PY) -m pytest tests -p no:cacheprovider -q

lint: setup
	$(VENV)/bin/ruff check book tests extension
	$(VENV)/bin/ruff format --check book tests extension

sync-check: setup
	$(PY) -m book.sync --check

# Re-execute chapters (all, or CHAPTERS="chapters/02_minimal_ops.ipynb") and save their outputs.
execute: setup
	$(PY) -m book.execute $(CHAPTERS)

bench: setup
	$(PY) -m book.bench

lab: setup
	$(VENV)/bin/jupyter lab chapters/

clean:
	rm -rf _build
