"""ONNX lowerings: recurrent (being written)."""
