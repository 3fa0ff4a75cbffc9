"""ONNX lowerings: sampling (being written)."""
