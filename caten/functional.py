"""Every library composite as a function on Tensors (LANGUAGE.md section 12), generated from
`ops/*.lisp` by `caten.tensor.methods`: `functional.softmax(x, axis=-1)`."""

import builtins as _builtins

from caten.tensor.methods import functions as _functions

globals().update(_functions())
# `from caten.functional import *` must not shadow Python's sum, max, min, abs, pow...
__all__ = sorted(n for n in _functions() if not hasattr(_builtins, n))
