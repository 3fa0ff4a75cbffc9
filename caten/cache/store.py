"""A content-addressed store of compiled artifacts under ~/.cache/caten.

Every entry is one file: a header line `caten-cache 1 <sha256 of payload> <length>\\n` then the
payload. Writes go to a temporary file renamed into place (atomic on POSIX), so readers see
either the whole old entry or the whole new one, and two processes writing the same key both
succeed. Reads verify length and checksum; a bad entry is deleted with a warning and treated
as a miss, never trusted. Reads touch the file's mtime, which orders LRU eviction.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"caten-cache 1 "
DEFAULT_CAP = 1 << 30  # 1 GiB


def default_dir() -> Path:
    """CATEN_CACHE_DIR, else $XDG_CACHE_HOME/caten, else ~/.cache/caten."""
    if os.environ.get("CATEN_CACHE_DIR"):
        return Path(os.environ["CATEN_CACHE_DIR"])
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
    """One cache folder. Unusable folders degrade to no caching with a one-line warning."""

    def __init__(self, root: Path | str | None = None, cap_bytes: int | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else default_dir()
        cap = cap_bytes if cap_bytes is not None else int(os.environ.get("CATEN_CACHE_MAX_BYTES", DEFAULT_CAP))
        self.cap = cap
        self.enabled = enabled
        self.stats = Stats()
        self._warned = False
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

    # reading and writing ---------------------------------------------------------------
    def get(self, key: str, kind: str) -> bytes | None:
        """The payload stored under (key, kind), or None; a corrupt entry is removed."""
        if not self.enabled:
            return None
        p = self.path(key, kind)
        try:
            data = p.read_bytes()
        except OSError:
            self._count(kind, False)
            return None
        payload = _unwrap(data)
        if payload is None:
            self.stats.corrupt += 1
            print(f"caten: warning: corrupt cache entry {p.name} removed; recompiling", file=sys.stderr)
            try:
                p.unlink()
            except OSError:
                pass
            self._count(kind, False)
            return None
        try:
            os.utime(p)  # recently used
        except OSError:
            pass
        self._count(kind, True)
        return payload

    def put(self, key: str, kind: str, payload: bytes) -> None:
        if not self.enabled:
            return
        p = self.path(key, kind)
        data = MAGIC + f"{hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=p.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, p)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as e:
            self._warn(f"cache folder {self.root} is not writable ({e.strerror}); going on without caching")
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

    # maintenance -----------------------------------------------------------------------
    def entries(self) -> list[tuple[Path, int, float]]:
        out = []
        if not self.root.is_dir():
            return out
        for sub in self.root.iterdir():
            if sub.is_dir():
                for f in sub.iterdir():
                    if not f.name.startswith(".tmp-"):
                        try:
                            st = f.stat()
                        except OSError:
                            continue
                        out.append((f, st.st_size, st.st_mtime))
        return out

    def size(self) -> int:
        return sum(s for _, s, _ in self.entries())

    def _evict(self) -> None:
        """Drop least recently used entries down to 90% of the cap (rescanning the folder, which
        other processes share, only when the running estimate says the cap is passed)."""
        ents = self.entries()
        total = sum(s for _, s, _ in ents)
        self._approx = total
        if total <= self.cap:
            return
        target = int(self.cap * 0.9)
        for f, s, _ in sorted(ents, key=lambda e: e[2]):  # least recently used first
            try:
                f.unlink()
            except OSError:
                continue
            total -= s
            if total <= target:
                break
        self._approx = total

    def clear(self) -> int:
        self._approx = None
        n = 0
        for f, _, _ in self.entries():
            try:
                f.unlink()
                n += 1
            except OSError:
                pass
        try:  # the reader's grammar tables (lark's own file, beside the entries)
            (self.root / "lark-grammar.cache").unlink()
        except OSError:
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


def default_cache() -> Cache:
    """The process-wide cache of the default folder (its stats are what `cache info -v` shows)."""
    global _default
    if _default is None or _default.root != default_dir():
        _default = Cache()
    return _default
