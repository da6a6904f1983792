"""What the Dockerfiles copy is what the package needs, and builds it: for each image,
the COPY sources are exactly pyproject.toml, its readme and src/ (where its packages
are found); exactly that set, copied to an empty folder, builds the wheel with every package
in it; and the GPU image's requirements resolve for Linux x86-64 with CUDA (its CUDA base
cannot be pulled here). The images themselves are built and run in test_image.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.deploy.podman import copied_paths

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile", "Dockerfile.gpu"]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def needed_sources() -> set[str]:
    """What building the package reads: pyproject.toml, the readme it names and the
    folders its packages are found in."""
    project = pyproject()
    return {"pyproject.toml", project["project"]["readme"], *project["tool"]["setuptools"]["packages"]["find"]["where"]}


def source_packages() -> list[str]:
    """Every package under src/, by its import name."""
    src = ROOT / "src"
    return sorted(".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py"))


def copy_set(sources: list[str], target: Path) -> Path:
    target.mkdir(parents=True)
    for source in sources:
        path = ROOT / source
        if path.is_dir():
            shutil.copytree(path, target / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, target / source)
    return target


def build_wheel(context: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """pip's own build of the package from context, offline (this environment's setuptools)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
        + ["-w", str(out), str(context)],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_copy_sources_are_exactly_what_the_package_needs(name):
    copied = copied_paths(ROOT / "deploy" / name)
    assert len(copied) == len(set(copied)), copied
    assert set(copied) == needed_sources(), (
        f"missing: {sorted(needed_sources() - set(copied))}, not needed: {sorted(set(copied) - needed_sources())}"
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_copy_set_builds_the_package_with_every_module(name, tmp_path):
    """Exactly what the image copies, in an empty folder, builds a wheel holding every
    package under src/ and the CLI's entry point."""
    context = copy_set(copied_paths(ROOT / "deploy" / name), tmp_path / "context")
    done = build_wheel(context, tmp_path / "wheels")
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = (tmp_path / "wheels").glob("rewardserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for package in source_packages():
        folder = package.replace(".", "/") + "/"
        assert any(n.startswith(folder) for n in names), package
    assert "rewardserve/cli/main.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)


@pytest.mark.long(30)
def test_the_gpu_image_s_requirements_resolve_for_linux_x86_64_with_cuda(tmp_path):
    """uv resolves the GPU image's install (`.[serve,vllm]`) for CPython 3.12 (Ubuntu
    24.04's) on manylinux x86-64: vLLM, and PyPI's torch with its CUDA libraries."""
    uv = ROOT / ".venv" / "bin" / "uv"
    text = (ROOT / "deploy" / "Dockerfile.gpu").read_text()
    assert '".[serve,vllm]"' in text, "the GPU image's install line changed: update this test"
    out = tmp_path / "requirements.txt"
    done = subprocess.run(
        [
            str(uv),
            "pip",
            "compile",
            "--quiet",
            "--no-config",
            "--python-platform",
            "x86_64-manylinux_2_28",
            "--python-version",
            "3.12",
            str(ROOT / "pyproject.toml"),
            "--extra",
            "serve",
            "--extra",
            "vllm",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pins = {
        line.split("==")[0]: line.split("==")[1].split()[0]
        for line in out.read_text().splitlines()
        if "==" in line and not line.startswith(("#", " "))
    }
    assert "vllm" in pins and "torch" in pins, sorted(pins)
    assert "+cpu" not in pins["torch"], pins["torch"]
    assert any(name.startswith("nvidia-cuda-runtime") for name in pins), sorted(pins)
    assert any(name.startswith("nvidia-cudnn") for name in pins), sorted(pins)
