"""caten's version, in a module of its own: the cache keys every stage computes include it, and
importing it from the package `caten` would tie each stage to the public API the package exposes."""

__version__ = "0.1.0"
