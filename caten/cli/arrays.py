"""Array files named on the command line (`NAME=PATH.npy`, `--weights PATH.npz`), read with a
diagnostic for each way a file can be wrong: numpy's own messages (a text file reads as "pickled
data") name neither the argument nor the fix."""

from __future__ import annotations

import os
import zipfile

import numpy as np

from caten.errors import Error, nearby_file

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
MAKE_NPY = "write one with numpy: np.save(\"x.npy\", np.asarray(values, dtype=np.float32))"


def _head(path: str, what: str) -> bytes:
    """The file's first bytes; a missing, folder or unreadable path is a diagnostic here."""
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except FileNotFoundError:
        near = nearby_file(path)
        raise Error(f"{what}: no such file: {path}", hint=f"did you mean {near}?" if near else MAKE_NPY) from None
    except IsADirectoryError:
        raise Error(f"{what}: {path} is a directory, not a .npy array file", hint=MAKE_NPY) from None
    except OSError as e:
        raise Error(f"{what}: cannot read {path}: {e.strerror or e}") from None


def _not_numpy(path: str, what: str, head: bytes, want: str) -> Error:
    text = _text(head)
    kind = ("it is empty" if not head else f"it holds text: {text!r}" if text is not None
            else "it is binary data of another format")
    return Error(f"{what}: {path} is not a {want} file ({kind})",
                 hint=MAKE_NPY if want == ".npy array" else
                 "write one with numpy: np.savez(\"w.npz\", NAME=array, ...)")


def _text(head: bytes) -> str | None:
    """The first line of a text file's head, or None for binary data."""
    try:
        s = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not just a character cut at the end of the head
            return None
        s = head[: e.start].decode("utf-8")
    if "\0" in s:
        return None
    first = s.strip().split("\n")[0]
    return first[:40] + ("..." if len(first) > 40 else "")


def load_npy(path: str, name: str | None = None) -> np.ndarray:
    """One array from a .npy file, for the input `name` (None: an input given by position)."""
    what = f"input {name}" if name else "input"
    head = _head(path, what)
    if head.startswith(ZIP_MAGIC):
        names = _npz_names(path)
        raise Error(f"{what}: {path} is an .npz archive ({names}), not a .npy array file",
                    hint="pass each array as NAME=PATH.npy, or the archive with --weights PATH.npz")
    if not head.startswith(NPY_MAGIC):
        raise _not_numpy(path, what, head, ".npy array")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise Error(f"{what}: {path} is a damaged or unsupported .npy file: {_reason(e)}", hint=MAKE_NPY) from None


def load_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz by name (`--weights`)."""
    what = "--weights"
    head = _head(path, what)
    if head.startswith(NPY_MAGIC):
        raise Error(f"{what}: {path} is a single .npy array, not an .npz archive of named arrays",
                    hint="pass it as NAME=PATH.npy, or save the weights with np.savez(\"w.npz\", NAME=array, ...)")
    if not head.startswith(ZIP_MAGIC):
        raise _not_numpy(path, what, head, ".npz archive")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as e:
        raise Error(f"{what}: {path} is a damaged or unsupported .npz file: {_reason(e)}") from None


def _npz_names(path: str) -> str:
    try:
        with zipfile.ZipFile(path) as z:
            names = [os.path.splitext(n)[0] for n in z.namelist()]
    except (zipfile.BadZipFile, OSError):
        return "unreadable"
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"arrays {shown}" if names else "no arrays"


def _reason(e: BaseException) -> str:
    msg = str(e).split("\n")[0] or type(e).__name__
    if "allow_pickle" in msg or "pickled" in msg:
        return "it holds Python objects, not numbers"
    return msg
