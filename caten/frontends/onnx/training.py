"""ONNX lowerings: training (being written)."""
