# The project's two commands (see README.md):
#
#   make book   build the book into _build/html and print where to open it
#   make test   a strict book build (every notebook run once), then every test (the browser test
#               included)
#
# Both set up the same virtual environment first (target `venv`). Needs only Python >= 3.10
# with venv and pip, GNU make and bash; `make test` also needs Debian's chromium and chromedriver,
# which it installs with apt when they are missing (target `browser`: root or sudo).
# PYTHON picks the interpreter that creates .venv.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
# Written after `pip install -r requirements.txt` succeeds; redone when either requirements file changes.
STAMP  := $(VENV)/.requirements-installed
# IPython reads kernel configuration from sys.prefix/etc/ipython, here the venv's.
KERNEL_CONFIG := $(VENV)/etc/ipython/ipython_kernel_config.py

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
.PHONY: book test strict-book unit-tests browser venv clean

BOOK_BUILD := jupyter-book build --all -W -n --keep-going .
INDEX      := $(CURDIR)/_build/html/index.html

book: venv
	$(BOOK_BUILD)
	@test -s "$(INDEX)"
	@echo
	@echo "The book is built. Open it in a browser:"
	@echo "  $(INDEX)"

# Tests of the built site: they read _build/html, so they run once the book is built.
SITE_TESTS := tests/test_browser.py tests/test_book_pages.py

# The strict book build and the tests that need no book run side by side (each mostly on one
# core of two); then the tests of the built site. The build executes every notebook once on the
# current code (its cache cleared): a notebook's hidden check cells are its tests, and a failing
# cell fails the build.
test: venv browser
	$(MAKE) --no-print-directory -j2 --output-sync=target strict-book unit-tests
	python -m pytest $(SITE_TESTS)
	@echo "make test: the strict book build (every notebook run once) and the tests passed"

strict-book:
	rm -rf _build/.jupyter_cache
	$(BOOK_BUILD)
	test -s "$(INDEX)"

unit-tests:
	python -m pytest tests $(addprefix --ignore=,$(SITE_TESTS))

# The browser test drives Debian's chromium through its chromedriver. A fresh CI machine has
# neither: install both with apt, as root or through sudo; nothing to do when both are on PATH.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; else \
	  echo "make browser: the browser test needs chromium and chromedriver on PATH; install the" \
	       "Debian packages chromium and chromium-driver as root (this user has no sudo)" >&2; \
	  exit 1; \
	fi; \
	set -x; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver

# Always re-run the editable install (a few seconds): setuptools maps the top-level packages
# (kernels, nkicpu, benchmarks) when it installs, so a package added later needs it again.
venv: $(STAMP) $(KERNEL_CONFIG)
	python -m pip install --quiet --no-deps -e .

# The venv's IPython kernel configuration: it keeps the kernels of the book build
# from printing one "running over TCP without encryption" warning each (see the file).
$(KERNEL_CONFIG): book/_ipython/ipython_kernel_config.py | $(VPY)
	install -D -m 644 $< $@

$(STAMP): requirements.txt requirements-book.txt | $(VPY)
	python -m pip install -r requirements.txt
	touch $@

$(VPY):
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf _build
