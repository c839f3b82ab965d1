"""The structure as a contract: the import layers declared in ``pyproject.toml`` (import-linter), no module
over 400 lines, and command-line entry points only in ``dreambench/cli``."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dreambench.workspace import PROJECT_ROOT

PACKAGES = ("dreambench", "methods")
MAX_MODULE_LINES = 400


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the packages under ``root`` with the contracts of ``root/pyproject.toml``."""
    executable = Path(sys.executable).with_name("lint-imports")
    command = [str(executable)] if executable.is_file() else [shutil.which("lint-imports") or "lint-imports"]
    env = {**os.environ, "PYTHONPATH": str(root)}  # the packages under root, not the installed ones
    return subprocess.run([*command, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _copy_tree(tmp_path: Path) -> Path:
    """The project's packages and contracts, copied so that a test can break them."""
    root = tmp_path / "tree"
    for package in PACKAGES:
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "datasets"))
    shutil.copy(PROJECT_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (PROJECT_ROOT / package).rglob("*.py"))


def test_the_import_contracts_hold():
    result = _lint_imports(PROJECT_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    root = _copy_tree(tmp_path)
    with (root / "dreambench" / "config.py").open("a") as handle:
        handle.write("\nfrom dreambench import runner  # noqa: E402  (the deliberate violation)\n")
    result = _lint_imports(root)
    assert result.returncode != 0
    assert "dreambench.config is not allowed to import dreambench.runner" in result.stdout


def test_a_cycle_inside_a_package_breaks_the_acyclic_contract(tmp_path):
    root = _copy_tree(tmp_path)
    # dreambench.data.training imports dreambench.data.text; the reverse closes a cycle within one layer
    with (root / "dreambench" / "data" / "text.py").open("a") as handle:
        handle.write("\nfrom dreambench.data import training  # noqa: E402  (the deliberate cycle)\n")
    result = _lint_imports(root)
    assert result.returncode != 0
    assert "no import cycle among the modules or subpackages of any package BROKEN" in result.stdout


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_no_module_is_longer_than_the_limit(path):
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


def test_command_line_entry_points_live_only_in_the_cli_package():
    offenders = []
    for path in _python_files():
        if path.parent.name == "cli":
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            is_main = isinstance(node, ast.FunctionDef) and node.name == "main"
            is_guard = isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            if is_main or is_guard:
                offenders.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")
    assert offenders == []
