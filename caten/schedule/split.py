"""Splitting a kernel's loops over threads. The iterations of a kernel's shared outer
loops are independent: every stage reads the others only at the same outer coordinates
(`KernelLowerer.check_outer` vetoes any other fusion), and memory reductions accumulate into
their own output slab. So a row softmax, a layernorm or an elementwise kernel runs chunks of
its first outer loop on the CPU's cores, as its GEMMs already do; its kernel-local scratch then
holds one slice per thread. In a kernel with a GEMM (which splits its own rows), the store
stages split their first loop instead (a GEMM's bias and activation epilogue; not a stage that
reads a register reduction's value, which lives in one thread) -- unless the outer loop shares
out evenly among the threads (`small_gemms`, `even_outer`; for a symbolic extent the choice is
made at run time, `outer_either`): then each thread runs whole iterations, GEMMs included. A kernel without outer loops
splits the block loop of each full float sum instead (`sum_split`): each thread adds its
blocks into a wide partial of its own, and the partials are added in thread order (so a result
depends only on the thread count). Small loops stay on one thread (starting one costs ~20 us)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.ops import Op

if TYPE_CHECKING:
    from caten.schedule.model import Kernel, Stage

SPLIT_MIN = 1 << 17  # elements a kernel's stages touch below which it stays on one thread
EVEN_EACH = 8  # outer iterations a thread from which one more for some threads is a small difference
GEMM_THREAD_MIN = 1 << 22  # multiply-adds below which a GEMM stays on one thread (~40 us of work)


def split_axis(k: Kernel) -> int | None:
    """The outer loop that is split: the first whose extent is not 1."""
    return next((a for a, d in enumerate(k.outer_shape) if d != 1), None)


def work(k: Kernel) -> Dim:
    """Elements the kernel's stages touch: its outer iterations times each stage's inner loops."""
    inner: Dim = 0
    for s in k.stages:
        shape = s.node.src[0].shape if s.node.op is Op.REDUCE else s.node.shape
        inner = D.add(inner, D.prod(shape[k.outer:]))
    return D.mul(D.prod(k.outer_shape), inner)


def outer_split(k: Kernel, threads: int) -> int:
    """How many threads kernel k's outer loops may be split over (1: not split); when its size
    is symbolic, the lowering still keeps a small call on one thread (`work` at run time)."""
    if threads < 2 or k.outer == 0:
        return 1
    if stagewise(k, threads):
        if outer_either(k, threads):
            return threads
        big = any(s.kind == "store" and len(s.node.shape) > k.outer and not _small(D.prod(s.node.shape[k.outer:]))
                  for s in k.stages)
        return threads if big else 1
    a = split_axis(k)
    if a is None or (isinstance(k.outer_shape[a], int) and k.outer_shape[a] < 2):
        return 1
    return 1 if _small(work(k)) else threads


def stagewise(k: Kernel, threads: int) -> bool:
    """Kernel k splits its store stages' first loops, not its outer loops: it has a GEMM, which
    splits its own rows, unless its GEMMs run whole on each thread (`small_gemms`)."""
    return any(s.mode == "tiled" for s in k.stages) and not small_gemms(k, threads)


def small_gemms(k: Kernel, threads: int = 2) -> bool:
    """Kernel k's GEMMs run whole on each thread, which takes whole iterations of the kernel's
    outer loops, with packed panels of its own (operands that no outer loop changes are packed
    once, before the threads start): when each GEMM does fewer than GEMM_THREAD_MIN
    multiply-adds an iteration (a classifier's per-image 64x64x64 products: none would start
    a thread; a digits training step ran its GEMM kernels on one core), or when the outer loop
    shares out evenly (`even_outer`): the threads then never wait for each other inside an
    iteration (a Mixer block's 8 images: ~80 splits and joins a call, the serial layernorm
    statistics and the rows' uneven shares of 14-row tiles cost 10%). A direct convolution keeps
    its shared weights and splits its columns."""
    if k.outer == 0:
        return False
    tiled = [s for s in k.stages if s.mode == "tiled"]
    if not tiled or any(s.plan is None or s.plan.gemm is None for s in tiled):
        return False
    if any(s.plan.gemm.direct is not None for s in tiled):
        return all(_few_macs(k, s) for s in tiled)
    return even_outer(k, threads) or all(_few_macs(k, s) for s in tiled)


def outer_either(k: Kernel, threads: int) -> bool:
    """Kernel k's GEMMs share their rows (its stages their first loops) among the threads, or
    the threads take whole iterations of its outer loop, chosen at run time: its extent is
    symbolic, and `even_outer` there picks the second (one image runs its GEMMs on every core,
    eight images run four each, with no join inside one). Not with a direct convolution."""
    if threads < 2 or not stagewise(k, threads):
        return False
    tiled = [s for s in k.stages if s.mode == "tiled"]
    if any(s.plan is None or s.plan.gemm is None or s.plan.gemm.direct is not None for s in tiled):
        return False
    a = split_axis(k)
    return a is not None and not isinstance(k.outer_shape[a], int)


def _few_macs(k: Kernel, s: Stage) -> bool:
    macs = D.prod(s.node.src[0].shape[k.outer:])
    return isinstance(macs, int) and macs < GEMM_THREAD_MIN


def even_outer(k: Kernel, threads: int) -> bool:
    """Kernel k's first non-unit outer loop gives each of `threads` the same number of
    iterations, or so many that one more is a small difference (`EVEN_EACH` each)."""
    a = split_axis(k)
    if a is None or threads < 2:
        return False
    e = k.outer_shape[a]
    return isinstance(e, int) and e >= threads and (e % threads == 0 or e >= EVEN_EACH * threads)


def _small(size: Dim) -> bool:
    return isinstance(size, int) and size < SPLIT_MIN


def sum_split(st: Stage) -> bool:
    """Stage st of a kernel without outer loops is a full float sum whose blocks may be split:
    every source axis reduced, cut at the first (`block_plan`), big enough unless symbolic."""
    n = st.node
    if st.kind != "reduce" or st.mode != "register" or st.plan.block is None or st.plan.block[0] != 0:
        return False
    if len(n.arg[1]) != n.src[0].rank:
        return False
    size = D.prod(n.src[0].shape)
    return not (isinstance(size, int) and size < SPLIT_MIN)
