"""The Core ATen ops caten refuses, each with why: what torch computes there is not a function of
the graph's inputs that a compiled caten program can reproduce exactly (a shape known only
from the values, torch's random stream, a complex dtype caten lacks). The importer's Error and
`caten import --list-ops` name the reason instead of a bare "missing"."""

from __future__ import annotations

_DATA_SHAPE = "its output shape depends on the input's values (caten's shapes are known before a program runs)"
_RANDOM = ("it draws from torch's random generator, whose stream caten cannot reproduce (pass the random "
           "tensor in as an input instead)")
_COMPLEX = "it has a complex input or output: caten has no complex dtype yet (issue #42)"

REFUSED: dict[str, str] = {
    "aten.nonzero.default": _DATA_SHAPE,
    "aten._local_scalar_dense.default": ("it reads a tensor's value into Python (`.item()`), which a compiled "
                                         "graph cannot do; keep the value a tensor"),
    "aten.rand.default": _RANDOM,
    "aten.randn.default": _RANDOM,
    "aten.randperm.default": _RANDOM,
    "aten._fft_r2c.default": _COMPLEX,
    "aten._fft_c2r.default": _COMPLEX,
}


def why(op: str) -> str:
    """Why `op` has no lowering: its reason if refused, else that no lowering is written yet."""
    return REFUSED.get(op, "no lowering yet (docs/import.md says how to add one)")
