"""DESIGN.md §3 import rules, checked on the source: every package of strata has a place in one strict
layer order (a package imports only packages of lower layers, and itself), a few packages import less
than their layer allows, the scheduler and the server load no torch or model code (checked on the source
and in a fresh interpreter), and the model layers reach the Triton kernels only through `model/ops.py`.

Imports inside `if __name__ == "__main__":` are a script's entry point (one calls the CLI): not counted."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "strata"

# Bottom to top. A new package or top-level module must be placed here (test_every_package_has_a_layer).
LAYERS = (
    ("types", "config", "transfer", "dma", "split_graphs", "progress", "reasoning", "page_advice"),  # base: nothing from strata
    ("kernels", "structured"),  # structured: request constraints -> grammars (torch-free)
    ("cache", "sample", "model"),
    ("weights", "experts"),
    ("tokenizer_gguf",),  # a GGUF file's tokenizer: opens the file through weights
    ("tokenizer",),
    ("spec",),
    ("runner", "scheduler"),
    ("engine",),
    ("server", "bench"),
    ("cli",),
    ("__init__",),  # strata/__init__.py: the offline API
)
LAYER_OF = {package: i for i, layer in enumerate(LAYERS) for package in layer}

# packages that may import only these (besides themselves), whatever their layer allows
ONLY = {
    "kernels": {"config"},  # a leaf: debug_flag only
    "model": {"kernels", "transfer", "config", "split_graphs", "page_advice"},
    "experts": {"model", "kernels", "config", "split_graphs", "dma", "transfer"},
}


def _is_main_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                    for c in test.comparators))


def import_nodes(path: pathlib.Path) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a file, module level or inside functions, except under a __main__ guard."""
    found, stack = [], [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not _is_main_block(node):
            stack.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in import_nodes(path):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif node.level:
            raise AssertionError(f"{path}: use absolute imports (from strata.x import y)")
        elif node.module == "strata":  # from strata import x: x is a package or module of strata
            names.update(f"strata.{alias.name}" for alias in node.names)
        elif node.module:
            names.add(node.module)
    return names


def package_of(module: str) -> str | None:
    """strata.model.moe -> "model"; strata -> "__init__"; None outside strata."""
    parts = module.split(".")
    if parts[0] != "strata":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def files(package: str) -> list[pathlib.Path]:
    target = ROOT / package
    return [target.with_suffix(".py")] if target.with_suffix(".py").exists() else sorted(target.rglob("*.py"))


def packages_on_disk() -> set[str]:
    found = {p.stem for p in ROOT.glob("*.py")}
    found |= {p.name for p in ROOT.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    return found


def test_every_package_has_a_layer():
    on_disk = packages_on_disk()
    assert not on_disk - set(LAYER_OF), f"place these in LAYERS (tests/test_import_rules.py): {on_disk - set(LAYER_OF)}"
    assert not set(LAYER_OF) - on_disk, f"LAYERS names packages that are gone: {set(LAYER_OF) - on_disk}"


@pytest.mark.parametrize("package", sorted(LAYER_OF))
def test_layer_order(package):
    allowed = {p for layer in LAYERS[:LAYER_OF[package]] for p in layer}
    allowed = (allowed & ONLY[package] if package in ONLY else allowed) | {package}
    for path in files(package):
        for module in imported_modules(path):
            target = package_of(module)
            assert target is None or target in allowed, \
                f"{path.relative_to(ROOT.parent)} imports {module}: {package} may import only {sorted(allowed)}"


@pytest.mark.parametrize("package, forbidden", [
    ("scheduler", ("torch", "strata.model", "strata.runner", "strata.weights", "strata.experts", "strata.sample")),
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


def test_weights_see_the_model_only_through_its_registry():
    for path in files("weights"):
        for module in imported_modules(path):
            assert package_of(module) != "model" or module == "strata.model.registry", \
                f"{path.relative_to(ROOT.parent)} imports {module}: use strata.model.registry"


def test_model_layers_reach_kernels_only_through_ops():
    """Only model/ops.py (with model/cpu_ops.py, the CPU path's native steps it re-exports) chooses between a
    kernel and its torch form: the other model files import torch references (`*_ref`, expert_mlp) from
    strata.kernels at most, and test no device."""
    for path in sorted((ROOT / "model").glob("*.py")):
        if path.name in ("ops.py", "cpu_ops.py"):
            continue
        for node in import_nodes(path):
            if isinstance(node, ast.Import):
                assert not any(alias.name.startswith("strata.kernels") for alias in node.names), path
            elif (node.module or "").startswith("strata.kernels"):
                launchers = [a.name for a in node.names if not a.name.endswith("_ref") and a.name != "expert_mlp"]
                assert not launchers, f"{path.relative_to(ROOT.parent)} imports {launchers}: call them through ops"
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Attribute) and node.attr == "is_cuda"), \
                f"{path.relative_to(ROOT.parent)}:{node.lineno} tests is_cuda: let an op in model/ops.py choose"


def modules_loaded_by(statement: str) -> list[str]:
    """sys.modules after running `statement` in a fresh interpreter."""
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.split()


def test_server_process_loads_no_model_code():
    loaded = modules_loaded_by("import strata.server.app, strata.cli.serve")
    bad = [m for m in loaded if m.split(".")[:2] in (["strata", "model"], ["strata", "runner"], ["strata", "scheduler"],
                                                    ["strata", "sample"], ["strata", "spec"])
           or m in ("strata.engine.core", "strata.weights.loader", "torch")]
    assert not bad


def test_scheduler_loads_no_torch():
    loaded = modules_loaded_by("import strata.scheduler.scheduler")
    assert not [m for m in loaded if m == "torch" or m.startswith("torch.")]
