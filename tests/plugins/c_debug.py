"""A toy C target variant, as a plugin file: the C runtime's renderer and loader, compiled by
`cc -O1 -g` without vectorization (code a debugger steps through line by line). The pipeline
does everything else -- scheduling, lowering, the compile cache under its own key, `--emit`."""

from __future__ import annotations

import caten.runtimes.c_rt as C

from caten.plugin import Capabilities, Options, Runtime

FLAGS = ["-O1", "-g", "-fno-tree-vectorize"]


class CDebug(Runtime):
    name = "c-debug"
    description = "C at -O1 -g, not vectorized (a toy variant of -r c)"
    renders, artifact_kind, checks_bounds = True, "c-debug-so", True

    def capabilities(self, t) -> Capabilities:
        return C.RUNTIME.capabilities(t)  # native=frozenset(): the renderer spells only primitives

    def toolchain(self, t) -> str:
        return C.RUNTIME.toolchain(t) + " " + " ".join(FLAGS)

    def render(self, lowered, t, options: Options) -> str:
        return C.generate(lowered, t)

    def compile_source(self, source: str, t, options: Options) -> bytes:
        return C.build(source, ".so", [*C.arch_flags(t), *FLAGS])

    def load(self, artifact: bytes, lowered, t, options: Options):
        return C.RUNTIME.load(artifact, lowered, t, options)

    def artifacts(self, source: str, kind: str, lowered, t, options: Options):
        return C.RUNTIME.artifacts(source, kind, lowered, t, options)


RUNTIME = CDebug()
