"""Frontends: other model formats (ONNX, torch.export) translated into caten source text.

They use only caten's public API (`caten.loads`), so what they produce is ordinary caten
text that every runtime compiles and that a user can read and edit.
"""
