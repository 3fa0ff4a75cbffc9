"""A content-addressed store of compiled artifacts under ~/.cache/caten.

Every entry is one file: a header line `caten-cache 1 <sha256 of payload> <length>\\n` then the
payload. Writes go to a temporary file renamed into place (atomic on POSIX), so readers see
either the whole old entry or the whole new one, and two processes writing the same key both
succeed. Reads verify length and checksum; a bad entry is deleted with a warning and treated
as a miss, never trusted. Reads touch the file's mtime, which orders LRU eviction.

The cache holds code that will run, so only a folder the user owns and nobody else can write
is used, and only the user's own files in it, opened without following links (safety.py);
payloads are data (codec.py), never pickles.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from caten.cache import safety

MAGIC = b"caten-cache 1 "
DEFAULT_CAP = 1 << 30  # 1 GiB
GRAMMAR_FILE = "lark-grammar.cache"


def default_dir() -> Path:
    """CATEN_CACHE_DIR, else $XDG_CACHE_HOME/caten, else ~/.cache/caten."""
    if os.environ.get("CATEN_CACHE_DIR"):
        return Path(os.environ["CATEN_CACHE_DIR"])
    return private_dir()


def private_dir() -> Path:
    """The user's own cache folder: where caching goes when the configured folder is refused."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "caten"


def key_of(*parts: str | bytes) -> str:
    """sha256 over length-prefixed parts: no two different part lists collide by concatenation."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    corrupt: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [hits, misses]


class Cache:
    """One cache folder. Unusable folders degrade to no caching with a one-line warning; a folder
    others could write to (or that someone else owns) is refused for a private one (safety.py)."""

    def __init__(self, root: Path | str | None = None, cap_bytes: int | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else default_dir()
        self.requested = self.root  # the folder asked for (root may become the private fallback)
        cap = cap_bytes if cap_bytes is not None else int(os.environ.get("CATEN_CACHE_MAX_BYTES", DEFAULT_CAP))
        self.cap = cap
        self.enabled = enabled
        self.stats = Stats()
        self._warned = False
        self._checked = False
        self._lock = threading.Lock()
        self._approx: int | None = None  # running estimate of the folder's size: a scan per put would be O(n^2)

    # paths ------------------------------------------------------------------------------
    def path(self, key: str, kind: str) -> Path:
        return self.root / key[:2] / f"{key}.{kind}"

    def _warn(self, msg: str) -> None:
        if not self._warned:
            print(f"caten: warning: {msg}", file=sys.stderr)
            self._warned = True

    def _count(self, kind: str, hit: bool) -> None:
        c = self.stats.by_kind.setdefault(kind, [0, 0])
        c[0 if hit else 1] += 1
        if hit:
            self.stats.hits += 1
        else:
            self.stats.misses += 1

    def usable(self) -> bool:
        """Check the folder once (creating it private if missing): a refused one is replaced by the
        user's private default folder, or caching is off; either way with one warning."""
        if not self.enabled or self._checked:
            return self.enabled
        self._checked = True
        try:
            safety.secure_root(self.root)
            return True
        except safety.Unsafe as e:
            why = f"cache folder {self.root} {e}, so others could plant code in it"
        except OSError as e:
            self._warn(f"cache folder {self.root} is not writable ({e.strerror}); going on without caching")
            self.enabled = False
            return False
        private = private_dir()
        if private != self.root:
            try:
                safety.secure_root(private)
                self._warn(f"{why}; caching in {private} instead")
                self.root = private
                return True
            except (safety.Unsafe, OSError):
                pass
        self._warn(f"{why}; going on without caching")
        self.enabled = False
        return False

    def _subdir(self, key: str, create: bool) -> int | None:
        """A checked descriptor of the entry's folder (the caller closes it), or None."""
        root = safety.open_root(self.root)
        try:
            return safety.open_subdir(root, key[:2], create)
        finally:
            os.close(root)

    # reading and writing ---------------------------------------------------------------
    def get(self, key: str, kind: str) -> bytes | None:
        """The payload stored under (key, kind), or None; a corrupt entry is removed, one the
        user did not write (or a symlink) is ignored."""
        if not self.usable():
            return None
        name = f"{key}.{kind}"
        try:
            d = self._subdir(key, False)
        except (OSError, safety.Unsafe):
            d = None
        if d is None:
            self._count(kind, False)
            return None
        try:
            fd = safety.open_file(d, name)
            if fd is None:
                self._count(kind, False)
                return None
            try:
                data = safety.read_all(fd)
                payload = _unwrap(data)
                if payload is not None:
                    try:
                        os.utime(fd)  # recently used
                    except (OSError, NotImplementedError):
                        pass
            finally:
                os.close(fd)
            if payload is None:
                self.stats.corrupt += 1
                print(f"caten: warning: corrupt cache entry {name} removed; recompiling", file=sys.stderr)
                safety.unlink_owned(d, name)
                self._count(kind, False)
                return None
        except OSError:
            self._count(kind, False)
            return None
        finally:
            os.close(d)
        self._count(kind, True)
        return payload

    def put(self, key: str, kind: str, payload: bytes) -> None:
        if not self.usable():
            return
        data = MAGIC + f"{hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload
        try:
            d = self._subdir(key, True)
            if d is None:  # a folder the user did not make (or a link) stands there: never write into it
                return
            try:
                safety.write_atomic(d, f"{key}.{kind}", data)
            finally:
                os.close(d)
        except (OSError, safety.Unsafe) as e:
            self._warn(f"cache folder {self.root} is not writable ({getattr(e, 'strerror', None) or e}); "
                       "going on without caching")
            self.enabled = False
            return
        self.stats.writes += 1
        with self._lock:
            if self._approx is None:
                self._approx = self.size()
            else:
                self._approx += len(data)
            if self._approx > self.cap:
                self._evict()

    def private_file(self, name: str) -> str | None:
        """A path in the root for a file another library writes itself (lark's grammar tables):
        whatever stands there that the user did not write (a symlink, someone else's file) is
        removed first, so the library never reads a planted file or writes through a link."""
        if not self.usable():
            return None
        try:
            root = safety.open_root(self.root)
        except (OSError, safety.Unsafe):
            return None
        try:
            fd = safety.open_file(root, name)
            if fd is not None:
                os.close(fd)
            elif os.path.lexists(self.root / name) and not safety.unlink_owned(root, name, links=True):
                return None  # something we cannot trust nor remove
        finally:
            os.close(root)
        return str(self.root / name)

    def seal(self, name: str) -> None:
        """Make the user's own file `name` in the root private (mode 600), never through a link."""
        try:
            root = safety.open_root(self.root)
        except (OSError, safety.Unsafe):
            return
        try:
            safety.make_private(root, name)
        finally:
            os.close(root)

    # maintenance -----------------------------------------------------------------------
    def _scan(self) -> list[tuple[str, str, int, float]]:
        """(folder, file, size, mtime) of the user's own entries; links and foreign files are
        never followed nor listed."""
        out: list[tuple[str, str, int, float]] = []
        if not self.usable():
            return out
        try:
            root = safety.open_root(self.root)
        except (OSError, safety.Unsafe):
            return out
        try:
            for sub in os.scandir(root):
                if not sub.is_dir(follow_symlinks=False):
                    continue
                d = safety.open_subdir(root, sub.name, False)
                if d is None:
                    continue
                try:
                    for f in os.scandir(d):
                        if f.name.startswith(".tmp-") or not f.is_file(follow_symlinks=False):
                            continue
                        try:
                            st = f.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if not safety.trusted(st):
                            out.append((sub.name, f.name, st.st_size, st.st_mtime))
                finally:
                    os.close(d)
        finally:
            os.close(root)
        return out

    def entries(self) -> list[tuple[Path, int, float]]:
        return [(self.root / d / f, s, t) for d, f, s, t in self._scan()]

    def size(self) -> int:
        return sum(s for _, _, s, _ in self._scan())

    def _remove(self, ents: list[tuple[str, str, int, float]], enough=lambda removed: False) -> int:
        """Unlink entries in order (each through its rechecked folder) until `enough(bytes removed)`."""
        n = removed = 0
        try:
            root = safety.open_root(self.root)
        except (OSError, safety.Unsafe):
            return 0
        try:
            for sub, name, s, _ in ents:
                d = safety.open_subdir(root, sub, False)
                if d is None:
                    continue
                try:
                    if safety.unlink_owned(d, name):
                        n, removed = n + 1, removed + s
                finally:
                    os.close(d)
                if enough(removed):
                    break
        finally:
            os.close(root)
        return n

    def _evict(self) -> None:
        """Drop least recently used entries down to 90% of the cap (rescanning the folder, which
        other processes share, only when the running estimate says the cap is passed)."""
        ents = self._scan()
        total = sum(e[2] for e in ents)
        self._approx = total
        if total <= self.cap:
            return
        target = int(self.cap * 0.9)
        lru = sorted(ents, key=lambda e: e[3])  # least recently used first
        self._remove(lru, lambda removed: total - removed <= target)
        self._approx = None

    def clear(self) -> int:
        self._approx = None
        n = self._remove(self._scan())
        if self.usable():
            try:  # the reader's grammar tables (lark's own file, beside the entries)
                root = safety.open_root(self.root)
                try:
                    safety.unlink_owned(root, GRAMMAR_FILE)
                finally:
                    os.close(root)
            except (OSError, safety.Unsafe):
                pass
        return n


def _unwrap(data: bytes) -> bytes | None:
    if not data.startswith(MAGIC):
        return None
    nl = data.find(b"\n")
    if nl < 0:
        return None
    try:
        digest, length = data[len(MAGIC):nl].decode().split()
        n = int(length)
    except (ValueError, UnicodeDecodeError):
        return None
    payload = data[nl + 1:]
    if len(payload) != n or hashlib.sha256(payload).hexdigest() != digest:
        return None
    return payload


_default: Cache | None = None
_off = False


def default_cache() -> Cache:
    """The process-wide cache of the default folder (its stats are what `cache info -v` shows)."""
    global _default
    if _default is None or _default.requested != default_dir():
        _default = Cache(enabled=not _off)
    return _default


def switch_off(off: bool = True) -> None:
    """No caching at all in this process (the CLI's `--no-cache`, until its command ends): besides
    compiled code, the parsed library, read sources, the roofline and lark's grammar tables are
    neither read nor written, so the cache folder is left as it was (or absent)."""
    global _default, _off
    _off, _default = off, None
