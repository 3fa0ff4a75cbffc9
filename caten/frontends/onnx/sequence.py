"""ONNX lowerings: sequence (being written)."""
