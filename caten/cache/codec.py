"""Cache payloads as JSON: parsing an entry runs no code named by the entry (unlike pickle).

A cache entry that someone else could have written must never be able to execute anything,
so the structures the cache keeps (parsed units, the library, programs, object-file metadata)
are written as tagged JSON. Decoding rebuilds only plain values, caten's own dataclasses and
enums (looked up by name in caten's own modules and filled in field by field, as pickle would,
without calling any method of theirs), dtypes by name, and dimension expressions through their
constructors. Anything else in an entry is an error: the caller treats it as a cache miss.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import importlib
import json
import re
from collections.abc import Iterator, Mapping

TAG = "@"
_MODULE = re.compile(r"^caten(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class CodecError(ValueError):
    """An entry (or a value to store) outside what the codec knows: a miss, never a crash."""


LONG = 40  # strings at least this long are written once (spans all carry their file's text)


def dumps(obj: object) -> bytes:
    """Two JSON lines: the table of long strings, then `obj` referring to it; raises CodecError on
    a value the codec cannot represent."""
    table: dict[str, int] = {}
    try:
        body = json.dumps(_Enc(table).enc(obj), separators=(",", ":"), allow_nan=True)
    except RecursionError as e:
        raise CodecError("value nested too deeply for the cache") from e
    return json.dumps(list(table), separators=(",", ":")).encode() + b"\n" + body.encode()


def loads(blob: bytes) -> object:
    """The value `dumps` wrote; raises CodecError on anything else."""
    try:
        head, _, body = blob.partition(b"\n")
        table = json.loads(head)
        if not isinstance(table, list) or not all(isinstance(s, str) for s in table):
            raise CodecError("bad string table")
        return json.loads(body, object_hook=lambda d: _dec(d, table))
    except CodecError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, ImportError) as e:
        raise CodecError(f"unreadable cache payload: {e}") from e


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class _Enc:
    def __init__(self, table: dict[str, int]):
        self.table = table

    def enc(self, x: object) -> object:
        t = type(x)
        if t is str:
            if len(x) >= LONG:  # type: ignore[arg-type]
                return {TAG: "r", "v": self.table.setdefault(x, len(self.table))}  # type: ignore[arg-type]
            return x
        if t in _SCALARS:
            return x
        if t is list:
            return [self.enc(v) for v in x]  # type: ignore[attr-defined]
        if t is Lazy:  # each value its own JSON text, over the same string table
            return {TAG: "L", "v": [[k, json.dumps(self.enc(v), separators=(",", ":"), allow_nan=True)]
                                    for k, v in x.items()]}  # type: ignore[attr-defined]
        # a parsed unit is mostly atoms, each with a span: one flat list each, not two or three dicts
        if t is _span_type():
            return {TAG: "S", "v": self.span(x)}
        atom = _ATOM_TAGS.get(f"{t.__module__}:{t.__qualname__}") if t.__module__ == "caten.read.sexpr" else None
        if atom is not None and type(x.span) is _span_type():  # type: ignore[attr-defined]
            return {TAG: atom[0], "v": [self.enc(getattr(x, atom[1])), *self.span(x.span)]}  # type: ignore[attr-defined]
        return _enc(x, self.enc)

    def span(self, sp) -> list:
        text = sp.text
        ref = None if text is None else self.table.setdefault(text, len(self.table)) if len(text) >= LONG else [text]
        return [self.enc(sp.file), sp.line, sp.col, sp.end_line, sp.end_col, ref]


_SCALARS = (int, float, bool, type(None))  # written as they are (exact types: an IntEnum is not one)
_SPAN: list = []


def _span_type() -> type:
    if not _SPAN:
        from caten.errors import Span

        _SPAN.append(Span)
    return _SPAN[0]


# the reader's atoms (caten.read.sexpr, named, not imported: the cache sits below the reader):
# class -> (tag, its value's field, the value's types)
_ATOM_TAGS = {"caten.read.sexpr:Sym": ("Y", "name", (str,)), "caten.read.sexpr:Num": ("N", "value", (int, float)),
              "caten.read.sexpr:Str": ("Q", "value", (str,)), "caten.read.sexpr:Kw": ("K", "name", (str,))}
_ATOMS = {tag: (cls, field, types) for cls, (tag, field, types) in _ATOM_TAGS.items()}


def _atom(tag: str, v: object, table: list[str]) -> object:
    """A reader atom (Sym, Num, Str, Kw) from its flat list: its value, then its span's."""
    name, field, types = _ATOMS[tag]
    if type(v) is not list or len(v) != 7 or type(v[0]) not in types:
        raise CodecError("malformed form in a cache payload")
    obj = object.__new__(_class(name))
    obj.__dict__.update({field: v[0], "span": _span(v, table, 1)})
    return obj


def _span(v: object, table: list[str], at: int = 0) -> object:
    """A Span from its flat list (from index `at`): file, line, col, end line, end col, and its
    text (None, an index of the string table, or [the string])."""
    if type(v) is not list or len(v) != at + 6:
        raise CodecError("malformed span in a cache payload")
    file, line, col, end_line, end_col, ref = v[at:]
    if type(file) is not str or type(line) is not int or type(col) is not int or type(end_line) is not int \
            or type(end_col) is not int:
        raise CodecError("malformed span in a cache payload")
    if ref is None:
        text = None
    elif type(ref) is int and 0 <= ref < len(table):
        text = table[ref]
    elif type(ref) is list and len(ref) == 1 and type(ref[0]) is str:
        text = ref[0]
    else:
        raise CodecError("malformed span text in a cache payload")
    obj = object.__new__(_span_type())
    obj.__dict__.update(file=file, line=line, col=col, end_line=end_line, end_col=end_col, text=text)
    return obj


_IR: list = []  # DType, Atom, DimExpr: imported at the first value that needs them, then kept


def _ir_types() -> list:
    if not _IR:
        from caten.ir.dims import Atom, DimExpr
        from caten.ir.dtypes import DType

        _IR.extend((DType, Atom, DimExpr))
    return _IR


def _enc(x: object, enc) -> object:
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int) and type(x) is int or type(x) is float:
        return x
    if isinstance(x, list):
        return [enc(v) for v in x]
    if type(x) is tuple:
        return {TAG: "t", "v": [enc(v) for v in x]}
    if type(x) is dict:
        return {TAG: "d", "v": [[enc(k), enc(v)] for k, v in x.items()]}
    if isinstance(x, (set, frozenset)):
        return {TAG: "fs" if isinstance(x, frozenset) else "s", "v": [enc(v) for v in x]}
    if isinstance(x, (bytes, bytearray)):
        return {TAG: "b", "v": base64.b64encode(bytes(x)).decode()}
    DType, Atom, DimExpr = _ir_types()
    if isinstance(x, DType):
        return {TAG: "dt", "v": x.name}
    if isinstance(x, Atom):
        return {TAG: "A", "op": x.op, "v": enc(x.args)}
    if isinstance(x, DimExpr):
        return {TAG: "D", "v": [[enc(m), c] for m, c in x.terms.items()]}
    if isinstance(x, enum.Enum) and type(x).__module__.startswith("caten."):
        return {TAG: "e", "c": _name(type(x)), "v": x.name}
    if dataclasses.is_dataclass(x) and not isinstance(x, type) and type(x).__module__.startswith("caten."):
        state = vars(x) if hasattr(x, "__dict__") else {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
        out = {k: enc(v) for k, v in state.items()}
        out[TAG] = _name(type(x))
        return out
    raise CodecError(f"the cache cannot store a {type(x).__module__}.{type(x).__qualname__}")


@functools.cache
def _class(name: str) -> type:
    """A class of caten's own by `module:qualname`; nothing else (no builtins, no other packages)."""
    mod, _, qual = name.partition(":")
    if not _MODULE.match(mod) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", qual):
        raise CodecError(f"cache payload names a class outside caten: {name!r}")
    cls = getattr(importlib.import_module(mod), qual, None)
    if not isinstance(cls, type) or cls.__module__ != mod:
        raise CodecError(f"cache payload names an unknown class {name!r}")
    return cls


@functools.cache
def _record(name: str) -> tuple[type, frozenset[str], bool]:
    """A caten dataclass by name, its field names, and whether instances have a __dict__."""
    cls = _class(name)
    if not dataclasses.is_dataclass(cls):
        raise CodecError(f"{name} is not a dataclass")
    return cls, frozenset(f.name for f in dataclasses.fields(cls)), "__dict__" in dir(cls)


def _plain(tag: str, d: dict, table: list[str]) -> object:
    if tag == "r":
        return table[d["v"]]
    if tag == "S":
        return _span(d["v"], table)
    if tag in _ATOMS:
        return _atom(tag, d["v"], table)
    if tag == "t":
        return tuple(d["v"])
    if tag == "d":
        return {k: v for k, v in d["v"]}
    if tag == "fs":
        return frozenset(d["v"])
    if tag == "s":
        return set(d["v"])
    if tag == "b":
        return base64.b64decode(d["v"], validate=True)
    if tag == "L":
        v = d["v"]
        if type(v) is not list or not all(type(p) is list and len(p) == 2 and type(p[0]) is str
                                          and type(p[1]) is str for p in v):
            raise CodecError("malformed lazy mapping in a cache payload")
        return Lazy.stored(dict(v), table)
    from caten.ir import dtypes as T

    _, Atom, DimExpr = _ir_types()
    if tag == "dt":
        return T.BY_NAME[d["v"]]
    if tag == "A":
        return Atom(str(d["op"]), tuple(d["v"]))
    if tag == "D":
        return DimExpr({tuple(m): int(c) for m, c in d["v"]})
    if tag == "e":
        cls = _class(d["c"])
        if not issubclass(cls, enum.Enum):
            raise CodecError(f"{d['c']} is not an enum")
        return cls[d["v"]]
    raise CodecError(f"unknown cache payload tag {tag!r}")


def _dec(d: dict, table: list[str]) -> object:
    tag = d.pop(TAG, None)
    if type(tag) is not str:
        raise CodecError("untagged object in a cache payload")
    if ":" not in tag:
        return _plain(tag, d, table)
    cls, names, has_dict = _record(tag)
    if d.keys() != names and (not has_dict or not names <= d.keys()):
        raise CodecError(f"{tag} entry does not match the class's fields (an older layout)")
    obj = object.__new__(cls)
    if has_dict:
        obj.__dict__.update(d)
    else:
        for k, v in d.items():
            object.__setattr__(obj, k, v)
    return obj


class Lazy(Mapping):
    """A mapping (string keys) stored with each value as its own JSON text and decoded on first
    access: a cold start reads the whole composite library (192 composites, ~0.1 s to decode)
    but elaborates a model with a tenth of it. Encode one by wrapping a dict: `dumps(Lazy(d))`.
    A value that does not decode raises CodecError where it is read, so a caller keys the entry
    by the code that wrote it (caten.elaborate.library: the reader's and this module's
    fingerprint) and only a damaged file can fail there."""

    def __init__(self, values: Mapping[str, object] | None = None):
        self._done: dict[str, object] = dict(values or {})
        self._keys = list(self._done)
        self._raw: dict[str, str] = {}
        self._table: list[str] = []

    @classmethod
    def stored(cls, raw: dict[str, str], table: list[str]) -> Lazy:
        """One read from a payload: each value's JSON text and the payload's string table."""
        obj = cls()
        obj._keys, obj._raw, obj._table = list(raw), raw, table
        return obj

    def __getitem__(self, key: str) -> object:
        if key in self._done:
            return self._done[key]
        text = self._raw[key]  # (KeyError: no such key)
        table = self._table
        try:
            value = json.loads(text, object_hook=lambda d: _dec(d, table))
        except CodecError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, ImportError) as e:
            raise CodecError(f"unreadable cache payload: {e}") from e
        return self._done.setdefault(key, value)  # (two threads decoding one key: both get the first's)

    def __contains__(self, key: object) -> bool:
        return key in self._done or key in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
