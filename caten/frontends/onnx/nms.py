"""ONNX lowerings: nms (being written)."""
