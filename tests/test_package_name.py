"""This project's import name `kernels` must not pass for Hugging Face's kernel-hub package.

The hub package is distributed on PyPI as `kernels`, and transformers probes for it with
`transformers.utils.import_utils._is_package_available("kernels", return_version=True)`:

1. `importlib.util.find_spec("kernels")`: finds this project's package too (editable install, or
   the repository root on sys.path);
2. `importlib.metadata.version("kernels")`: fails, no distribution is named `kernels`;
3. (transformers 5.x) the distributions that `importlib.metadata.packages_distributions()` maps
   the name `kernels` to: this project's `nki-gdn-book`, through its top_level.txt;
4. only if no metadata answers: `import kernels` and read `kernels.__version__`.

`is_kernels_available()` then accepts a version in [KERNELS_MIN_VERSION, KERNELS_MAX_VERSION).
This project stays out of every such range, so transformers takes its own fallback paths, and
the probe answers from metadata at step 3, so it never imports this project's `kernels` (which
would register the CPU model as `nki` inside a transformers process).

None of these tests imports the `kernels` package.
"""
import ast
import importlib.metadata as md
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _project_field(key):
    """A string field of pyproject.toml's [project] table (tomllib is Python 3.11+ only)."""
    table = re.search(r"^\[project\]$(.*?)(?=^\[|\Z)", (REPO / "pyproject.toml").read_text(), re.M | re.S)
    return re.search(rf'^{key}\s*=\s*"([^"]+)"', table.group(1), re.M).group(1)


DIST = _project_field("name")

# The first release of Hugging Face's `kernels` on PyPI. Every range that transformers has
# accepted starts above it, so a version below it is rejected by all of them.
FIRST_HUB_RELEASE = Version("0.1.7")

# (transformers releases, KERNELS_MIN_VERSION, KERNELS_MAX_VERSION or None) as read from
# transformers' src/transformers/utils/import_utils.py. 4.57 had no range: its probe needed a
# distribution named `kernels` (test_no_distribution_is_named_kernels).
TRANSFORMERS_RANGES = [
    ("5.0", "0.9.0", None),
    ("5.10", "0.10.2", None),
    ("5.20-5.22", "0.17.2", "0.18.0"),
    ("5.23-5.24", "0.18.2", "0.19.0"),
    ("5.25", "0.19.1", "0.20.0"),
]

# Public names of the hub package that transformers imports from it.
HUB_NAMES = {
    "Device", "LayerRepository", "Mode", "get_kernel", "kernelize", "register_kernel_mapping",
    "replace_kernel_forward_from_hub", "use_kernel_forward_from_hub", "use_kernel_mapping",
}


def _installed_version():
    try:
        return md.version(DIST)
    except md.PackageNotFoundError:
        pytest.skip(f"{DIST} is not installed here (`make test` installs it with pip install -e .)")


def transformers_style_probe(pkg="kernels"):
    """transformers' `_is_package_available(pkg, return_version=True)` (5.20 and later), except
    that where transformers would import the package to read `__version__`, this returns None."""
    if importlib.util.find_spec(pkg) is None:  # a top-level find_spec does not run the package
        return False, "N/A"
    try:
        return True, md.version(pkg)
    except md.PackageNotFoundError:
        pass
    normalized = pkg.replace("_", "-")
    distributions = md.packages_distributions().get(pkg, [])
    candidates = [*(n for n in (normalized, pkg) if n in distributions), *distributions, normalized, pkg]
    for name in dict.fromkeys(candidates):
        try:
            return True, md.version(name)
        except md.PackageNotFoundError:
            continue
    return True, None


def test_declared_version_is_below_every_hub_release():
    declared = Version(_project_field("version"))
    assert declared < FIRST_HUB_RELEASE, (
        f"pyproject.toml version {declared} must stay below {FIRST_HUB_RELEASE}: transformers reads it "
        "as the version of Hugging Face's `kernels` package (see this file's docstring)")


def test_no_distribution_is_named_kernels():
    try:
        hub = md.version("kernels")
    except md.PackageNotFoundError:
        return
    pytest.fail(
        f"Hugging Face's `kernels` {hub} is installed in this environment (transformers 5.25 and later "
        "require it). It has the same import name as this project's package, so one of the two shadows "
        "the other. Use a separate virtual environment for this project.")


def test_top_level_kernels_belongs_to_this_distribution():
    _installed_version()
    # The same distribution can be listed twice: run from the repository root, the editable
    # install's nki_gdn_book.egg-info there is found beside the venv's dist-info.
    owners = md.packages_distributions().get("kernels")
    assert owners and set(owners) == {DIST}, (
        f"the top-level name `kernels` should map to {DIST!r} only, got {owners}: without that "
        "mapping transformers imports the package to find its version")


def test_installed_version_is_below_every_hub_release():
    assert Version(_installed_version()) < FIRST_HUB_RELEASE


@pytest.mark.parametrize("releases, min_version, max_version", TRANSFORMERS_RANGES)
def test_probe_answers_from_metadata_and_rejects(releases, min_version, max_version):
    installed = _installed_version()
    exists, found = transformers_style_probe("kernels")
    if not exists:
        pytest.skip("`kernels` is not importable from here")
    assert found is not None, "transformers would have to import `kernels` to find its version"
    assert found == installed
    accepted = Version(found) >= Version(min_version) and (
        max_version is None or Version(found) < Version(max_version))
    assert not accepted, f"transformers {releases} would take {DIST} {found} for the hub package"


def test_import_kernels_resolves_to_this_repository(tmp_path):
    """From a folder other than the repository root (as a notebook in stages/ runs), the name
    `kernels` must still find this project's package, not another one earlier on sys.path."""
    _installed_version()
    code = "import importlib.util; print(importlib.util.find_spec('kernels').origin)"
    origin = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                            capture_output=True, text=True).stdout.strip()
    assert Path(origin).resolve() == REPO / "kernels" / "__init__.py"


def test_kernels_module_does_not_look_like_the_hub_package():
    init = REPO / "kernels" / "__init__.py"
    if not init.exists():
        pytest.skip("kernels/__init__.py does not exist yet")
    tree = ast.parse(init.read_text())
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined.add(target.id)
                    if target.id == "__version__" and isinstance(node.value, ast.Constant):
                        assert Version(node.value.value) < FIRST_HUB_RELEASE
    assert not defined & HUB_NAMES, f"kernels/__init__.py defines hub names {defined & HUB_NAMES}"


PROBE = """
import json, sys
from transformers.utils import import_utils as iu
exists, version = iu._is_package_available("kernels", return_version=True)
print(json.dumps({"exists": exists, "version": version, "accepted": bool(iu.is_kernels_available()),
                  "imported": "kernels" in sys.modules, "nki": "nki" in sys.modules}))
"""


@pytest.mark.parametrize("where", ["repository root", "other folder"])
def test_transformers_probe_takes_its_fallback(where, tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed; the metadata tests above cover its probe's logic")
    _installed_version()
    cwd = REPO if where == "repository root" else tmp_path
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["accepted"] is False, result
    assert result["imported"] is False and result["nki"] is False, (
        f"transformers imported this project's kernels package to probe it: {result}")
