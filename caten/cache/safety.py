"""What makes a cache folder and its files trustworthy: they are code that will run.

Compiled objects from the cache are mapped and executed, so everything read from it must have
been written by the current user. A folder is used only if the user owns it and neither group
nor others can write to it (a shared folder such as /tmp, mode 1777, lets anyone plant or
replace entries); inside it, every directory and file is opened relative to an already checked
directory with O_NOFOLLOW, and must itself be owned by the user and not writable by others, so
no symlink planted in the cache is ever followed (for reading, writing or deleting) and no
file outside the folder is ever touched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block the open


class Unsafe(Exception):
    """A folder the cache must not use, with the reason in words."""


def euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1


def trusted(st: os.stat_result) -> str | None:
    """Why a file or folder with this status cannot be trusted, or None if it can."""
    if hasattr(os, "geteuid") and st.st_uid != euid():
        return f"is owned by uid {st.st_uid}, not by you (uid {euid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def secure_root(root: Path) -> None:
    """Create `root` (mode 700) if missing; raise Unsafe if it must not be used as a cache, OSError
    if it cannot be (not a folder, not creatable)."""
    if not root.exists() and not root.is_symlink():
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:  # created meanwhile (perhaps by someone else): checked below
            pass
    lst = os.lstat(root)
    if stat.S_ISLNK(lst.st_mode) and hasattr(os, "geteuid") and lst.st_uid not in (euid(), 0):
        raise Unsafe(f"is a symlink owned by uid {lst.st_uid}, not by you")
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, "not a folder", str(root))
    why = trusted(st)
    if why:
        raise Unsafe(why)


def open_root(root: Path) -> int:
    """A descriptor of the (already checked) root, rechecked: it may have been swapped since."""
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    why = trusted(os.fstat(fd))
    if why:
        os.close(fd)
        raise Unsafe(why)
    return fd


def open_subdir(parent: int, name: str, create: bool) -> int | None:
    """A descriptor of the folder `name` inside `parent`, or None if it is missing, a symlink or
    not trusted (never followed, never created through a link)."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or trusted(st):
        os.close(fd)
        return None
    return fd


def open_file(parent: int, name: str) -> int | None:
    """A read descriptor of the regular file `name` inside `parent` if the user wrote it, else None."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or trusted(st):
        os.close(fd)
        return None
    return fd


def read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def write_atomic(parent: int, name: str, data: bytes) -> None:
    """Write `name` inside `parent` through a fresh private temporary file renamed into place
    (rename replaces a planted symlink itself, never what it points to)."""
    tmp = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent)
        except OSError:
            pass
        raise


def unlink_owned(parent: int, name: str, links: bool = False) -> bool:
    """Remove `name` from `parent` if it is the user's own regular file (or, with `links`, any
    symlink: unlink never follows one, the link goes and its target stays)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return False
    if not (stat.S_ISREG(st.st_mode) and st.st_uid == euid() or links and stat.S_ISLNK(st.st_mode)):
        return False
    try:
        os.unlink(name, dir_fd=parent)
        return True
    except OSError:
        return False


def make_private(parent: int, name: str) -> None:
    """chmod 600 the user's own regular file `name` in `parent` (opened without following links)."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=parent)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == euid():
            os.fchmod(fd, 0o600)
    except OSError:
        pass
    finally:
        os.close(fd)
