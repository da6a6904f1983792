"""The code sent into the sandbox as text (models/rules/code/sandbox/inside/) runs where
nothing of rewardserve and no third-party package is installed: it may import the
standard library only. import-linter holds the rewardserve side (pyproject.toml); this
test holds the rest, reading every import statement outside ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
import sys

from rewardserve.models.rules.code.sandbox import command

INSIDE = command.INSIDE


def runtime_imports(tree: ast.Module) -> list[str]:
    names: list[str] = []
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "__import__"
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    return names


def test_the_code_sent_into_the_sandbox_imports_the_standard_library_only():
    files = sorted(p for p in INSIDE.glob("*.py") if p.name != "__init__.py")
    assert {p.name for p in files} >= {"driver.py", "files.py", "apart.py"}
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    for path in files:
        for name in runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            assert name.split(".")[0] in allowed, f"{path.name} imports {name}, which is not the standard library"


def test_the_driver_sent_in_is_these_files():
    program = command.driver_source()
    for part in (command.DRIVER, command.FILES, command.APART):
        assert part.parent == INSIDE and part.is_file()
        assert part.read_text() in program


def test_the_check_sees_a_third_party_import():
    tree = ast.parse("import os\nimport numpy\nif TYPE_CHECKING:\n    import torch\n")
    assert runtime_imports(tree) == ["os", "numpy"]
