"""ONNX lowerings: controlflow (being written)."""
