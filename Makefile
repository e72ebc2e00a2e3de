# The project's two commands (see README.md):
#
#   make book   build the book into _build/html and print where to open it
#   make test   run every test and notebook, then a strict book build
#
# Both set up the same virtual environment first (target `venv`). Needs only Python >= 3.10
# with venv and pip, GNU make and bash. PYTHON picks the interpreter that creates .venv.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
# Written after `pip install -r requirements.txt` succeeds; redone when either requirements file changes.
STAMP  := $(VENV)/.requirements-installed

# Run every recipe inside the venv: its bin/ first on PATH, so `python` in a notebook kernel,
# `jupyter-book` and `pytest` are the venv's, and Jupyter prefers the venv's kernelspecs.
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export JUPYTER_PREFER_ENV_PATH := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# nkicpu's matmuls are tiny: BLAS threads only contend on a 2-core machine (about 6x slower).
export OPENBLAS_NUM_THREADS ?= 1

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DELETE_ON_ERROR:
.PHONY: book test venv clean

BOOK_BUILD := jupyter-book build --all -W -n --keep-going .
INDEX      := $(CURDIR)/_build/html/index.html
# Folders pytest looks in: tests/ plus the notebook folders that exist (git keeps no empty folder).
PYTEST_PATHS := tests $(wildcard stages book)

book: venv
	$(BOOK_BUILD)
	@test -s "$(INDEX)"
	@echo
	@echo "The book is built. Open it in a browser:"
	@echo "  $(INDEX)"

test: venv
	python -m pytest $(PYTEST_PATHS) --nbmake --nbmake-timeout=600
	$(BOOK_BUILD)
	test -s "$(INDEX)"
	@echo "make test: tests, notebooks and the strict book build all passed"

# Always re-run the editable install (a few seconds): setuptools maps the top-level packages
# (kernels, nkicpu, benchmarks) when it installs, so a package added later needs it again.
venv: $(STAMP)
	python -m pip install --quiet --no-deps -e .

$(STAMP): requirements.txt requirements-book.txt | $(VPY)
	python -m pip install -r requirements.txt
	touch $@

$(VPY):
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf _build
