"""Every Python package folder is in pyproject's package list (else wheels miss it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setup = project["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set()
    for top, name in setup["package-dir"].items():
        for init in (ROOT / name).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / name)
            found.add(".".join([top, *rel.parts]))
    assert found == listed


def test_client_imports_without_the_serve_stack():
    import subprocess
    import sys

    code = (
        "import sys; import rewardserve.client; "
        "bad = [m for m in ('torch', 'transformers', 'fastapi', 'rewardserve.models') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
