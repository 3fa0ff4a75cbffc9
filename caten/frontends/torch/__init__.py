"""The torch importer (`caten.from_torch`): a module captured by torch.export -> caten text.

`export` walks the exported program, `context` holds the translation state and the `@aten`
registry, `aten`/`aten_nn` lower ATen calls to caten text directly; `bridge` lowers them through
`caten.Tensor` (placeholder Tensors, their lazy graph printed as text), which `aten_core`,
`aten_nn_core`, `aten_compose` and `aten_backward` (the training-step ops) use for the rest of
the Core ATen opset; `refused` names the few Core ATen ops caten cannot compute exactly, with why.
docs/import.md says how to add an aten op; `caten import model.pt2 --list-ops` shows which ones a
model needs.
"""
