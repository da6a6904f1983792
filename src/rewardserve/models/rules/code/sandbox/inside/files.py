"""The sandbox's working folders (inside/driver.py's): the request's files written in
before each test, a test's files read out after it, and the folders emptied and restored
between completions.

Standard library only: the driver runs this text as its own (sandbox.py
``driver_source``), under the system's Python, and nothing here imports the service.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rewardserve.models.rules.code.sandbox.inside.driver import WORKDIR

EMPTIED_MOST = 1 << 16  # files and folders; past it the sandbox ends rather than empty them


def empty(top: str) -> None:
    """Everything under ``top`` (a completion's files) gone, folders it made unreadable
    included, walking the tree without recursion (a chain of folders deeper than the
    interpreter's stack is a completion's to make); an OSError where something will not
    go, or there is too much: the sandbox then ends, and the next completion gets a new
    one (sandbox.py)."""
    pending = [(top, False)]
    seen = 0
    while pending:
        folder, listed = pending.pop()
        if listed:  # its entries are gone
            if folder != top:
                os.rmdir(folder)
            continue
        pending.append((folder, True))
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > EMPTIED_MOST:
                    raise OSError(f"over {EMPTIED_MOST} files to empty")
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.path, 0o700)  # one it made unreadable, or unwritable, too
                    pending.append((entry.path, False))
                else:
                    os.unlink(entry.path)


def open_under(path: str, flags: int) -> int:
    """A descriptor for ``path`` (relative, checked by the service) under the working
    directory, following no symbolic link on the way: a test may have left links."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise OSError(f"{path!r} is not a plain relative path")
    folder = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if flags & os.O_CREAT:
                try:
                    os.mkdir(part, 0o755, dir_fd=folder)
                except FileExistsError:
                    pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644, dir_fd=folder)
    finally:
        os.close(folder)


def put_files(files: "dict[str, bytes]") -> None:
    """The request's files, afresh before each test."""
    for path, data in files.items():
        fd = open_under(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def fetch_files(paths: "list[str]", cap: int) -> "dict[str, bytes]":
    """The regular files a test left at ``paths`` (their first ``cap`` bytes); a path
    that is missing, a link, a folder or a pipe is left out."""
    import stat

    found: dict[str, bytes] = {}
    for path in paths:
        try:
            fd = open_under(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                found[path] = os.read(fd, cap)
        except OSError:
            pass
        finally:
            os.close(fd)
    return found


def restored(modes: "dict[str, int]") -> bool:
    """The working folders empty and as they were (their mode, and no extended attributes:
    a default ACL there would give every later file mode 000); False where they would not
    be."""
    try:
        for folder, mode in modes.items():
            if os.path.isdir(folder):
                empty(folder)
            os.chmod(folder, mode & 0o7777)
            for name in os.listxattr(folder):
                os.removexattr(folder, name)
            if os.stat(folder).st_mode != mode or os.listxattr(folder):
                return False
    except (OSError, RecursionError, MemoryError):
        return False
    return True
