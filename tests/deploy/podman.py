"""Building and running the deploy/ images with rootful podman, without Docker or a
registry (the route checked in shared/research/containers.md).

The images' FROM lines name registry images (python:3.11-slim, nginx, prometheus); each
gets a local stand-in made from Debian's packages: a Debian root made with debootstrap
and imported, with Python (or the program) from apt on top. Builds are cached: podman's
layer cache, and each built image carries a label with the hash of everything it was
built from, so unchanged inputs are not built again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
# Every image and container the tests make is named under this prefix, so that cleaning
# up never touches anyone else's.
PREFIX = "rewardserve-test"
BASE = f"localhost/{PREFIX}/debian:bookworm"
PYTHON_STANDIN = f"localhost/{PREFIX}/python:3.11-slim"
SERVICE_IMAGE = f"localhost/{PREFIX}/rewardserve:cpu"
INPUTS_LABEL = "rewardserve.test.inputs"
SUITE = "bookworm"


class PodmanError(RuntimeError):
    """A podman command failed; its output is in the message."""


def conf_file() -> Path:
    """A containers.conf of the tests' own (the machine's /etc/containers is left alone):
    runc and cgroupfs (crun stops on a hybrid cgroup hierarchy), and container rlimits no
    higher than this shell's hard ones (root here lacks CAP_SYS_RESOURCE, and podman's
    defaults are above them)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else nofile
    text = (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    path = Path(tempfile.gettempdir()) / f"{PREFIX}-containers.conf"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def podman(*args: str, timeout: float = 120, check: bool = True, stdin: bytes | None = None) -> str:
    env = {**os.environ, "CONTAINERS_CONF": str(conf_file())}
    done = subprocess.run(["podman", *args], input=stdin, capture_output=True, env=env, timeout=timeout)
    out = done.stdout.decode(errors="replace")
    if check and done.returncode != 0:
        raise PodmanError(f"podman {' '.join(args[:3])} ... exited {done.returncode}: {done.stderr.decode()[-4000:]}")
    return out


def label_of(image: str) -> str | None:
    """The inputs hash an image was built from, or None when there is no such image."""
    out = podman("image", "inspect", "--format", "json", image, check=False)
    found = json.loads(out) if out.strip() else []
    if not found:
        return None
    labels = found[0].get("Labels") or {}
    return labels.get(INPUTS_LABEL)


def image_id(image: str) -> str:
    return podman("image", "inspect", "--format", "{{.Id}}", image).strip()


def debian_mirror() -> str:
    """The apt mirror this machine uses (deb822 or one-line sources), else Debian's own."""
    for path in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if path.exists():
            found = re.search(r"^(?:URIs:\s*|deb\s+)(\S+)", path.read_text(), re.M)
            if found:
                return found.group(1)
    return "http://deb.debian.org/debian"


def base_image() -> str:
    """A minimal Debian root from debootstrap, imported: the bottom of every stand-in."""
    key = hashlib.sha256(f"debootstrap minbase {SUITE} {debian_mirror()}".encode()).hexdigest()
    if label_of(BASE) == key:
        return BASE
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-rootfs-") as rootfs:
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, rootfs, debian_mirror()],
            capture_output=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise PodmanError(f"debootstrap failed: {done.stderr.decode()[-4000:]}")
        tar = subprocess.run(["tar", "-C", rootfs, "-c", "."], capture_output=True, check=True, timeout=300).stdout
    podman("import", "--change", f"LABEL {INPUTS_LABEL}={key}", "-", BASE, stdin=tar, timeout=300)
    return BASE


def ca_certificates(context: Path) -> None:
    """The machine's local CAs into a build context: outbound HTTPS here is re-signed by
    one, so pip and apt inside a build trust what the host trusts."""
    target = context / "ca"
    target.mkdir(exist_ok=True)
    for cert in Path("/usr/local/share/ca-certificates").glob("**/*.crt"):
        shutil.copy(cert, target / cert.name)


def standin(name: str, tag: str) -> str:
    """tests/deploy/standins/<name>.Containerfile built on the Debian base as ``tag``
    (layer-cached)."""
    base = base_image()
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-ctx-") as context:
        ca_certificates(Path(context))
        for extra in STANDINS.glob(f"{name}.*"):
            shutil.copy(extra, Path(context) / extra.name)
        podman(
            "build",
            "--pull=never",
            "--format",
            "docker",
            "--build-arg",
            f"BASE={base}",
            "-f",
            str(STANDINS / f"{name}.Containerfile"),
            "-t",
            tag,
            context,
            timeout=900,
        )
    return tag


def copied_paths(dockerfile: Path) -> list[str]:
    """The sources of a Dockerfile's COPY lines (relative to the build context)."""
    sources: list[str] = []
    for line in re.findall(r"^COPY\s+(.+)$", dockerfile.read_text(), re.M):
        words = [w for w in line.split() if not w.startswith("--")]
        sources += words[:-1]
    return sources


def inputs_hash(dockerfile: Path, build_args: dict[str, str], base: str) -> str:
    """Everything an image is built from: its Dockerfile, the files its COPY lines take
    (less bytecode caches), its build arguments and its base image."""
    digest = hashlib.sha256()
    digest.update(dockerfile.read_bytes())
    digest.update(json.dumps(sorted(build_args.items())).encode())
    digest.update(image_id(base).encode())
    for source in sorted(copied_paths(dockerfile)):
        path = ROOT / source
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and "__pycache__" not in file.parts:
                digest.update(str(file.relative_to(ROOT)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


def find_links() -> str | None:
    """pip's configured find-links folder here (where this machine's CPU build of torch
    lies), if it has one."""
    folder = subprocess.run(
        ["python3", "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True
    ).stdout.strip()
    return folder if folder and Path(folder).is_dir() else None


def pip_conf(workdir: Path) -> Path:
    """A pip.conf for inside a build: the find-links folder and the system's CA bundle."""
    lines = ["[global]", "cert = /etc/ssl/certs/ca-certificates.crt"]
    if find_links():
        lines.append(f"find-links = {find_links()}")
    path = workdir / "pip.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def service_image() -> str:
    """deploy/Dockerfile built as shipped, its FROM pointed at the Python stand-in;
    where pip has a find-links folder, torch comes from it (PyTorch's CPU index, the
    default, does not resolve on this machine type), else from that index. Built only
    when its inputs changed."""
    python = standin("python", PYTHON_STANDIN)
    dockerfile = ROOT / "deploy" / "Dockerfile"
    build_args = {"TORCH_INDEX": "https://pypi.org/simple"} if find_links() else {}
    key = inputs_hash(dockerfile, build_args, python)
    if label_of(SERVICE_IMAGE) == key:
        return SERVICE_IMAGE
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-pip-") as workdir:
        conf = pip_conf(Path(workdir))
        volumes = ["-v", f"{conf}:/etc/pip.conf:ro"]
        folder = find_links()
        if folder:
            volumes += ["-v", f"{folder}:{folder}:ro"]
        args = [a for name, value in build_args.items() for a in ("--build-arg", f"{name}={value}")]
        podman(
            "build",
            "--pull=never",
            "--format",
            "docker",  # the OCI format drops HEALTHCHECK
            "--build-context",
            f"python:3.11-slim=docker-image://{python}",
            *args,
            *volumes,
            "--label",
            f"{INPUTS_LABEL}={key}",
            "-f",
            str(dockerfile),
            "-t",
            SERVICE_IMAGE,
            str(ROOT),
            timeout=1800,
        )
    # The build it replaced, left untagged: gigabytes each.
    podman("image", "prune", "--force", "--filter", f"label={INPUTS_LABEL}", check=False, timeout=300)
    return SERVICE_IMAGE


@dataclass
class Container:
    name: str
    url: str

    def logs(self) -> str:
        """What the container wrote, stdout and stderr (the service logs to stderr)."""
        env = {**os.environ, "CONTAINERS_CONF": str(conf_file())}
        done = subprocess.run(
            ["podman", "logs", self.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60
        )
        return done.stdout.decode(errors="replace")

    def exec(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "CONTAINERS_CONF": str(conf_file())}
        return subprocess.run(["podman", "exec", self.name, *command], capture_output=True, env=env, timeout=timeout)


def free_port() -> int:
    from tests.harness import free_port as harness_free_port

    return harness_free_port()


def remove(name: str) -> None:
    """A test's container gone with its anonymous volumes (VOLUME leaves them behind)."""
    podman("rm", "--force", "--volumes", "--time", "10", name, check=False, timeout=120)


@contextlib.contextmanager
def container(image: str, *options: str, name_suffix: str = "svc") -> Iterator[Container]:
    """The image run detached on a loopback port; removed, volumes too, on exit."""
    name = f"{PREFIX}-{name_suffix}-{os.getpid()}"
    remove(name)
    port = free_port()
    podman("run", "--detach", "--name", name, "-p", f"127.0.0.1:{port}:8000", *options, image, timeout=120)
    try:
        yield Container(name, f"http://127.0.0.1:{port}")
    finally:
        remove(name)


def state(name: str) -> dict:
    out = podman("container", "inspect", "--format", "json", name, check=False)
    found = json.loads(out) if out.strip() else []
    return found[0]["State"] if found else {}


def wait_ready(box: Container, seconds: float = 240) -> None:
    """Until /ready answers 200; fails with the container's log when it exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if state(box.name).get("Status") not in ("running", "created", "configured"):
            raise AssertionError(f"the container stopped before /ready:\n{box.logs()[-4000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(box.url + "/ready", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise AssertionError(f"/ready did not answer 200 within {seconds} s:\n{box.logs()[-4000:]}")


def wait_exited(name: str, seconds: float = 240) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        current = state(name)
        if current.get("Status") in ("exited", "stopped"):
            return current
        time.sleep(0.5)
    raise AssertionError(f"{name} still running after {seconds} s")


def compose_images() -> dict[str, str]:
    """The images docker-compose.yml runs without a profile, under the names it gives
    them: the service's as built here, nginx's and Prometheus' as stand-ins."""
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    service = service_image()
    tagged = f"localhost/{services['rewardserve']['image']}"
    podman("tag", service, tagged)
    return {
        "rewardserve": tagged,
        "nginx": standin("nginx", docker_hub_name(services["nginx"]["image"])),
        "prometheus": standin("prometheus", docker_hub_name(services["prometheus"]["image"])),
    }


def docker_hub_name(image: str) -> str:
    """The name podman finds an unqualified image under (Docker Hub's)."""
    first = image.split("/")[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


if __name__ == "__main__":
    # `make test-images` builds (or finds cached) every image before the tests run, so
    # that no fixture waits minutes on a build.
    for role, name in compose_images().items():
        print(f"{role}: {name}")
