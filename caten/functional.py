"""Every library composite as a function on Tensors (LANGUAGE.md section 12), generated from
`ops/*.lisp` by `caten.tensor.methods`: `functional.softmax(x, axis=-1)`."""

from caten.tensor.methods import functions as _functions

globals().update(_functions())
__all__ = sorted(_functions())
