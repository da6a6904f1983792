"""The sandbox's system-call filter (sandbox.py hands it to bwrap's ``--seccomp``), and
the errors a sandbox that cannot run raises."""

from __future__ import annotations

import errno
import functools
import os


class SandboxUnavailable(RuntimeError):
    """The isolation the code model needs is missing here; the message names what."""


class SandboxGone(SandboxUnavailable):
    """The sandbox's driver was gone before it took the completion."""


# Refused inside the sandbox (EPERM): reaching another process's memory or descriptors
# (the driver's result pipe: pidfd_getfd copies it without ptrace), System V IPC and POSIX
# message queues (objects that outlive their processes), new namespaces and mounts, and the kernel's rarer surfaces.
DENIED_CALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd", "kcmp",
    "process_madvise", "shmget", "semget", "msgget", "mq_open",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "keyctl", "add_key",
    "request_key", "bpf", "perf_event_open", "kexec_load", "kexec_file_load", "userfaultfd",
    "io_uring_setup", "init_module", "finit_module", "delete_module", "swapon", "swapoff",
    "reboot", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "fanotify_init",
    "syslog",
    # A session of its own is an autogroup of its own where no cgroup bounds the sandbox's
    # CPU: weighed as a nice-0 session beside the host's, whatever the sandbox's nice.
    "setsid",
)  # fmt: skip
# Refused where no memory cgroup bounds the sandbox as a whole: a memfd's pages count in no
# process's address space, so each process could hold its file limit per open file.
NO_MEMORY_CGROUP_CALLS = ("memfd_create",)
# Refused where they name another process (a non-zero pid or ``who``): a test's child knows
# the driver's pid, and limits, a priority or an affinity set on the driver would pass to
# every later test it forks, another completion's included. Argument index of the pid.
OTHER_PROCESS_CALLS = {
    "prlimit64": 0, "sched_setaffinity": 0, "sched_setscheduler": 0, "sched_setparam": 0,
    "sched_setattr": 0, "setpriority": 1, "ioprio_set": 1,
}  # fmt: skip
NEW_NAMESPACES = 0x10000000 | 0x20000000 | 0x40000000 | 0x04000000 | 0x08000000 | 0x00020000 | 0x02000000
# CLONE_NEWUSER, NEWPID, NEWNET, NEWIPC, NEWUTS, NEWNS, NEWCGROUP


@functools.cache
def seccomp_program(memory_cgroup: bool = True) -> bytes:
    """The sandbox's system-call filter as BPF (pyseccomp over the system's libseccomp),
    for bwrap's ``--seccomp``: everything allowed but DENIED_CALLS, OTHER_PROCESS_CALLS on
    another process and a clone into new namespaces; clone3 answers ENOSYS, so that the C
    library falls back to clone, whose flags the filter can read. Without a
    ``memory_cgroup`` over the sandbox, NO_MEMORY_CGROUP_CALLS too."""
    import tempfile

    try:
        import pyseccomp as seccomp  # type: ignore[import-untyped, unused-ignore]
    except Exception as exc:  # noqa: BLE001 - not installed, or no libseccomp
        raise SandboxUnavailable(f"no seccomp filter: pip install pyseccomp, apt install libseccomp2 ({exc})") from None
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED_CALLS + (() if memory_cgroup else NO_MEMORY_CGROUP_CALLS):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for flag in (1 << bit for bit in range(32) if NEW_NAMESPACES >> bit & 1):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for name, at in OTHER_PROCESS_CALLS.items():
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name, seccomp.Arg(at, seccomp.NE, 0))
    # A process group's or a user's priority (``which`` not PRIO_PROCESS, IOPRIO_WHO_PROCESS)
    # reaches the driver with a who of 0 too.
    rules.add_rule(seccomp.ERRNO(errno.EPERM), "setpriority", seccomp.Arg(0, seccomp.NE, 0))
    rules.add_rule(seccomp.ERRNO(errno.EPERM), "ioprio_set", seccomp.Arg(0, seccomp.NE, 1))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as file:
        rules.export_bpf(file)
        file.seek(0)
        return file.read()


def seccomp_fd(memory_cgroup: bool = True) -> int:
    """The filter in a file of its own for one bwrap to read from its start."""
    fd = os.memfd_create("rewardserve-seccomp")
    os.write(fd, seccomp_program(memory_cgroup))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
