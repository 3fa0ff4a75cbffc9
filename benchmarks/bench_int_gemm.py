"""The integer GEMM over 16-bit pairs against caten's f32 GEMM, and both against the ISA's bound:

    python benchmarks/bench_int_gemm.py [--size 1024] [--reps 10]

Times, in one process and alternating rounds (`timing.rounds`): `matmul-int` of u8 x i8 -> i32
(caten.schedule.pairs: vpmaddwd on AVX2/AVX-512, vpdpwssd with VNNI) and `matmul` of f32, both
size^3 on the llvm runtime, with their GOP/s and the ratio. Then the two instruction streams'
peaks on one core, measured by JIT-compiled loops of independent chains: FMA (2 flops a lane) and
the pair multiply-add (2 multiply-adds a 32-bit lane, each 2 ops): the ratio the GEMMs can reach
at best on this host. Report the machine (lscpu) beside the numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import numpy as np
from timing import rounds

SRC = """
(composite mmi ((A{u8}[M K] B{i8}[K N]) -> (C{i32}[M N])) (matmul-int A B))
(composite mmf ((A{f32}[M K] B{f32}[K N]) -> (C{f32}[M N])) (matmul A B))
"""


def _peak_loop(kind: str, chains: int = 12) -> str:
    """LLVM IR of `f(n, p, out)`: n iterations of `chains` independent multiply-add chains of
    256-bit vectors (FMA for "fma", pmaddwd + add for "pair"), the sums stored so nothing folds."""
    t, x = ("<8 x float>", "<8 x float>") if kind == "fma" else ("<8 x i32>", "<16 x i16>")
    phis = "\n".join(f"  %a{i} = phi {t} [zeroinitializer, %entry], [%n{i}, %loop]" for i in range(chains))
    ops = []
    for i in range(chains):
        if kind == "fma":
            ops.append(f"  %n{i} = call {t} @llvm.fma.v8f32({t} %x, {t} %y{i % 2}, {t} %a{i})")
        else:  # (the product depends on the chain, so it cannot be hoisted out of the loop)
            ev = ", ".join(f"i32 {2 * k}" for k in range(8))
            od = ", ".join(f"i32 {2 * k + 1}" for k in range(8))
            ops.append(f"  %b{i} = bitcast {t} %a{i} to {x}\n"
                       f"  %s{i} = sext {x} %b{i} to <16 x i32>\n  %t{i} = sext {x} %y{i % 2} to <16 x i32>\n"
                       f"  %m{i} = mul <16 x i32> %s{i}, %t{i}\n"
                       f"  %e{i} = shufflevector <16 x i32> %m{i}, <16 x i32> poison, <8 x i32> <{ev}>\n"
                       f"  %o{i} = shufflevector <16 x i32> %m{i}, <16 x i32> poison, <8 x i32> <{od}>\n"
                       f"  %u{i} = add {t} %e{i}, %o{i}\n  %n{i} = add {t} %u{i}, %a{i}")
    stores = "\n".join(f"  %q{i} = getelementptr {t}, ptr %out, i64 {i}\n  store {t} %n{i}, ptr %q{i}, align 4"
                       for i in range(chains))
    return f"""
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
define void @f(i64 %n, ptr %p, ptr %out) {{
entry:
  %x = load {x}, ptr %p, align 4
  %p1 = getelementptr {x}, ptr %p, i64 1
  %y0 = load {x}, ptr %p1, align 4
  %p2 = getelementptr {x}, ptr %p, i64 2
  %y1 = load {x}, ptr %p2, align 4
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
{phis}
{chr(10).join(ops)}
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
{stores}
  ret void
}}"""


def peaks(turns: int = 7) -> dict[str, float]:
    """One core's multiply-add rate (G multiply-adds/s) of each stream: the best of `turns` runs,
    the two measured by turns (a shared host slows some)."""
    from caten import target
    from caten.compile import llvmobj

    llvm, host = llvmobj.llvm(), target.host()
    fns, keep = {}, []
    for kind in ("fma", "pair"):
        mod = llvmobj.optimize(_peak_loop(kind), host.cpu, host.features, 3)
        engine = llvm.create_mcjit_compiler(mod, llvmobj.target_machine(host.cpu, host.features, 3, jit=True, own=True))
        engine.finalize_object()
        keep.append(engine)
        fns[kind] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
            engine.get_function_address("f"))
    buf, res = (ctypes.c_float * 64)(*([0.001] * 64)), (ctypes.c_float * 96)()
    n, best = 5_000_000, {k: float("inf") for k in fns}
    for _ in range(turns):
        for kind, f in fns.items():
            t0 = time.perf_counter()
            f(n, buf, res)
            best[kind] = min(best[kind], time.perf_counter() - t0)
    return {k: n * 12 * (8 if k == "fma" else 16) / best[k] / 1e9 for k in fns}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import caten
    from caten import target

    n = args.size
    m = caten.loads(SRC, runtime="llvm", defines={"M": n, "K": n, "N": n})
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (n, n), dtype=np.uint8), rng.integers(-128, 128, (n, n), dtype=np.int8)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    assert np.array_equal(m.mmi(a, b), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))
    t = rounds({"int": lambda: m.mmi(a, b), "f32": lambda: m.mmf(af, bf)}, args.reps)
    ops = 2 * n ** 3 / 1e9
    host = target.host()
    print(f"host: {host.cpu} ({host.vector_bits}-bit vectors)")
    print("| GEMM | ms | GOP/s |\n|---|---|---|")
    for k in ("int", "f32"):
        print(f"| {'u8 x i8 -> i32 (pairs)' if k == 'int' else 'f32'} {n}^3 | {t[k] * 1e3:.2f} | {ops / t[k]:.0f} |")
    print(f"\nint / f32 speed: {t['f32'] / t['int']:.2f}x")
    p = peaks()
    print(f"one core's peak: FMA {p['fma']:.1f} G multiply-adds/s, pair multiply-add {p['pair']:.1f}: "
          f"the integer stream's bound is {p['pair'] / p['fma']:.2f}x the f32 one on this host")


if __name__ == "__main__":
    main()
