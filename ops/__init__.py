"""The composite library and built-in rule files, written in caten's own language."""
