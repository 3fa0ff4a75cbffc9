"""Compile/load: rendered code to objects, on several cores, cached by content."""
