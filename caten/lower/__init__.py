"""Lowering: a schedule -> loop IR (caten.loopir), one `Kernel` per scheduled kernel.

`kernel_lowerer` holds the lowerer (`lower`, `KernelLowerer`); the other modules are its helpers
and the passes over loop IR after it (decompose, bounds, verify, text). Nothing is re-exported
here, so that a renderer importing one helper (`dimx`, `dimargs`) does not load the lowerer.
"""
