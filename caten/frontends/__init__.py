"""Frontends: other model formats (ONNX, torch.export) translated into caten source text.

They use only caten's public API (`caten.loads`), so what they produce is ordinary caten
text that every runtime compiles and that a user can read and edit.

`onnx/` and `torch/` are the two importers (`caten.onnx` and `caten.from_torch` their public faces);
`text` (literals, symbols), `registry` (the op registries' decorator) and `deps` (optional
packages) are what both share; `import_docs` generates docs/import.md's op tables.
"""
