"""How a float is spelled in caten source text, written once for every producer of caten text
(the ONNX and torch importers, the lazy Tensor's traced programs): `nan`, `inf`, `-inf`, or
Python's shortest round-tripping repr with a decimal point, so the reader reads it back as a float."""

from __future__ import annotations


def float_text(f: float) -> str:
    """f as a caten float literal that reads back as exactly f."""
    if f != f:
        return "nan"
    if f in (float("inf"), float("-inf")):
        return "inf" if f > 0 else "-inf"
    s = repr(f)
    return s if ("." in s or "e" in s) else s + ".0"
