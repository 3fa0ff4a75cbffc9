"""The ONNX importer: an ONNX graph -> caten text (`translate.convert`), one `setf` per node.

`handlers` lowers each node through the family module whose name says what the op is
(`elementwise`, `movement`, `reduce`, `matmul`, `conv`, `norm`, `quant`, `index`, `creation`);
`fold` folds shape arithmetic at conversion time, `expand` replaces an op without a handler by its
ONNX function body, `narrow` carries ONNX's narrow types. docs/import.md says how to add an op.
`caten.onnx` is the public face (`load`, `backend`).
"""

from caten.frontends.onnx.translate import convert

__all__ = ["convert"]
