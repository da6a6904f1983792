"""Every Python package folder under src/rewardserve/ is a package (else wheels miss it)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_has_its_init():
    """pyproject finds packages under src/ without namespaces: a folder of modules
    without __init__.py would be left out of the wheel."""
    folders = {p.parent for p in (ROOT / "src" / "rewardserve").rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, missing


def test_client_imports_without_the_serve_stack():
    import subprocess
    import sys

    code = (
        "import sys; import rewardserve.client; "
        "bad = [m for m in ('torch', 'transformers', 'fastapi', 'rewardserve.models') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.long(40)
def test_a_client_only_install_has_its_commands(tmp_path):
    """The wheel with its base dependencies only (httpx, pydantic): ``--help``, ``paths``
    and ``score --url`` work; ``serve`` says in one line which extra to install."""
    import json
    import os
    import subprocess
    import sys

    from tests.harness import serve_subprocess

    uv = Path(sys.executable).parent / "uv"
    env = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(tmp_path / "uv-cache"))}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)

    # Built from a copy of the tracked files: setuptools writes build/ beside the sources.
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.split():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            (source / name).write_bytes((ROOT / name).read_bytes())
    built = run(str(uv), "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(source))
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("rewardserve-*.whl")
    venv = tmp_path / "client-only"
    assert run(str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)).returncode == 0
    python = venv / "bin" / "python"
    installed = run(str(uv), "pip", "install", "--quiet", "--python", str(python), str(wheel))
    assert installed.returncode == 0, installed.stderr[-2000:]
    command = str(venv / "bin" / "rewardserve")
    absent = run(
        str(python),
        "-c",
        "import importlib.util as u; print([m for m in ('torch', 'yaml', 'fastapi') if u.find_spec(m)])",
    )
    assert absent.stdout.strip() == "[]", absent.stdout
    helped = run(command, "--help")
    assert helped.returncode == 0 and "serve" in helped.stdout, helped.stderr
    paths = run(command, "paths")
    assert paths.returncode == 0 and "integrations/verl.py" in paths.stdout, paths.stderr
    served = run(command, "serve")
    lines = served.stderr.strip().splitlines()
    assert served.returncode == 2 and len(lines) == 1 and "pip install 'rewardserve[serve]'" in lines[0], served.stderr
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"response": r"\boxed{2}", "reference": "2"}) + "\n")
    with serve_subprocess() as url:
        scored = run(command, "score", str(items), "-o", str(tmp_path / "out.jsonl"), "--url", url, "--model", "math")
    assert scored.returncode == 0, scored.stderr
    assert json.loads((tmp_path / "out.jsonl").read_text())["score"] == 1.0
