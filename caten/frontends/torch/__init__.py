"""The torch importer (`caten.from_torch`): a module captured by torch.export -> caten text.

`export` walks the exported program, `context` holds the translation state and the `@aten`
registry, `aten` the lowerings of ATen core-IR calls. docs/import.md says how to add an aten op.
"""
