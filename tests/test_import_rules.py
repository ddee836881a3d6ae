"""DESIGN.md §3 import rules, checked on the source: the pure-data modules import nothing from strata,
the scheduler never imports torch or the model, the runner never imports the scheduler, the server
imports no model code (checked on the source and in a fresh interpreter)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "strata"


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def files(package: str) -> list[pathlib.Path]:
    target = ROOT / package
    return [target.with_suffix(".py")] if target.with_suffix(".py").exists() else sorted(target.rglob("*.py"))


@pytest.mark.parametrize("package, forbidden", [
    ("types", ("strata",)),
    ("config", ("strata",)),
    ("scheduler", ("torch", "strata.model", "strata.runner", "strata.weights")),
    ("runner", ("strata.scheduler",)),
    ("model", ("strata.scheduler", "strata.engine", "strata.runner")),
    ("cache/block_allocator", ("torch",)),
    # the server process holds no model: only the engine client, plain data, config and the tokenizer
    ("server", ("torch", "strata.model", "strata.runner", "strata.scheduler", "strata.sample", "strata.spec",
                "strata.cache", "strata.weights", "strata.engine.core", "strata.engine.llm")),
    ("engine/client", ("torch", "strata.model", "strata.runner", "strata.scheduler", "strata.engine.core")),
    ("engine/process", ("torch", "fastapi", "strata.server")),
    ("engine/core", ("fastapi", "uvicorn", "strata.server")),
])
def test_import_rules(package, forbidden):
    for path in files(package):
        for module in imported_modules(path):
            assert not any(module == f or module.startswith(f + ".") for f in forbidden), \
                f"{path.relative_to(ROOT.parent)} imports {module}"


def test_server_process_loads_no_model_code():
    import subprocess
    import sys

    code = ("import sys; import strata.server.app, strata.cli.serve; "
            "bad = [m for m in sys.modules if m.split('.')[:2] in (['strata', 'model'], ['strata', 'runner'], "
            "['strata', 'scheduler'], ['strata', 'sample'], ['strata', 'spec']) "
            "or m in ('strata.engine.core', 'strata.weights.loader', 'torch')]; print(bad); assert not bad")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
