"""`caten.onnx`: load ONNX models as compiled caten modules (LANGUAGE.md section 13).

    mod = caten.onnx.load("model.onnx", runtime="llvm")
    y = mod(x)                 # numpy in, numpy out; initializers are bound already
    print(mod.source)          # the caten text the graph became

`caten.onnx.backend` implements onnx's `Backend` interface over the same translation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.frontends.deps import need

__all__ = ["load", "OnnxModule"]


class OnnxModule:
    """A converted ONNX graph compiled for one runtime; call it with the graph's inputs."""

    def __init__(self, model: Any, runtime: str = "llvm", **kw: Any):
        import caten
        from caten.frontends.onnx import convert

        self.converted = convert(model)
        self.source = self.converted.text
        self.runtime = runtime
        self._mod = caten.loads(self.source, runtime=runtime, **kw)
        self._fn = getattr(self._mod, self.converted.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        names = self.converted.inputs
        if kwargs:
            missing = [n for n in names[len(args):] if n not in kwargs]
            if missing:
                raise Error(f"missing input(s) {', '.join(missing)} of the ONNX graph")
            args = tuple(args) + tuple(kwargs[n] for n in names[len(args):])
        if len(args) != len(names):
            raise Error(f"the ONNX graph takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        from caten.frontends.onnx.narrow import to_carrier

        # narrow ONNX types caten has no dtype for (int4, float4 ...) in and out as their carrier arrays
        # (docs/import.md); float8 arrays are caten's own dtypes
        return self._fn(*[to_carrier(np.asarray(a))[0] for a in args], *self.converted.weights.values())


def load(path: Any, runtime: str = "llvm", **kw: Any) -> OnnxModule:
    """Read an .onnx file (or take a ModelProto) and compile it for `runtime`."""
    onnx = need("onnx", "onnx")
    if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
        try:
            model = onnx.load(str(path))
        except FileNotFoundError:
            raise Error(f"{path}: no such file") from None
        except Exception as e:  # a protobuf decode error: not an ONNX file
            raise Error(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
    else:
        model = path
    return OnnxModule(model, runtime, **kw)
