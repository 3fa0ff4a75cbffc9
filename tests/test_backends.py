"""The C-style runtimes: `-r c`, `-r opencl` (PoCL on the CPU here) and `-r cuda`.

Small programs run on every available C-style runtime against the numpy reference; the
artifacts they write (C source + header + shared library, OpenCL C + manifest, CUDA C / PTX
+ manifest) are checked by the tools that consume them: the C ABI through ctypes, the OpenCL
manifest by a tiny host that follows it, the CUDA source with nvcc and the PTX with ptxas.
A test skips, saying why, only when its toolchain or device is absent.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.plugin import Options

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.lisp")) + sorted((ROOT / "examples").glob("*.yaml"))

PROGRAMS = """
(composite sm ((X{f32}[B, N]) -> (Y{f32}[B, N])) (softmax X :axis -1))
(composite ln ((X{f32}[B, N] G{f32}[N] Bt{f32}[N]) -> (Y{f32}[B, N])) (layernorm X G Bt :axis -1))
(composite mm ((A{f32}[M, K] W{f32}[K, N]) -> (C{f32}[M, N])) (matmul A W))
(composite total ((A{f32}[M, K]) -> (C{f32})) (sum A))
(composite colsum ((A{f32}[M, K]) -> (C{f32}[K])) (sum A :axis 0))
(composite amax ((A{f32}[M, K]) -> (C{i64}[M])) (argmax A :axis 1))
(composite padh ((A{f16}[M, K]) -> (C{f16}[M, (+ K 2)])) (pad A [[0 0] [1 1]] :value 1.5))
(composite bfm ((A{bf16}[N] B{bf16}[N]) -> (C{bf16}[N])) (* (+ A B) A))
(composite noise ((A{f32}[M, K]) -> (C{f32}[M, K])) (+ A (rand [M K] :seed 3)))
(composite divmod ((A{i32}[N] B{i32}[N]) -> (Q{i32}[N] R{i32}[N])) (return (idiv A B) (mod A B)))
(composite fdm ((A{f64}[N] B{f64}[N]) -> (Q{f64}[N] R{f64}[N])) (return (idiv A B) (mod A B)))
(composite casts ((A{f32}[N]) -> (I{i8}[N] U{u16}[N] Z{bool}[N])) (return (cast A i8) (cast (abs A) u16) (cast A bool)))
(composite wrap ((A{i32}[N]) -> (C{i32}[N])) (* A 65537))
(composite anyall ((A{bool}[M, K]) -> (C{bool}[M])) (max A :axis 1))
(composite flipcat ((A{f32}[M, K]) -> (C{f32}[M, (* 2 K)])) (concat A (flip A :axis 1) :axis 1))
(composite trig ((A{f32}[N]) -> (C{f32}[N])) (+ (sin A) (log (+ (exp A) 1.0))))
"""


def _runtimes() -> list[str]:
    return ["c", "opencl"]


def _usable(name: str) -> None:
    try:
        ok, why = R.get(name).available()
    except Exception as e:  # pragma: no cover - an import failure is a reason to skip
        ok, why = False, str(e)
    if not ok:
        pytest.skip(f"runtime {name} unavailable: {why}")


@pytest.fixture(scope="module")
def reference():
    return caten.loads(PROGRAMS, runtime="numpy")


_mods: dict = {}


def _mod(name: str):
    if name not in _mods:
        _mods[name] = caten.loads(PROGRAMS, runtime=name)
    return _mods[name]


def _cases():
    r = np.random.default_rng(0)
    x = r.standard_normal((5, 77)).astype(np.float32)
    x[1, 3] = -np.inf
    g, b = r.standard_normal(77).astype(np.float32), r.standard_normal(77).astype(np.float32)
    w = r.standard_normal((77, 33)).astype(np.float32)
    ia = r.integers(-100, 100, 50).astype(np.int32)
    ib = r.integers(-7, 7, 50).astype(np.int32)
    ib[:3] = [0, -1, 0]
    fa = r.standard_normal(50) * 10
    fb = r.standard_normal(50)
    fb[0] = 0.0
    big = (r.standard_normal(40) * 50).astype(np.float32)
    big[:3] = [np.nan, np.inf, -0.0]
    return [
        ("sm", [np.where(np.isinf(x), 0, x).astype(np.float32)], 1e-6),
        ("ln", [x[2:], g, b], 1e-5),
        ("mm", [x[2:], w], 1e-5),
        ("total", [w], 1e-5),
        ("colsum", [w], 1e-5),
        ("amax", [x], 0),
        ("padh", [x.astype(np.float16)], 0),
        ("bfm", [_bf16(x[0]), _bf16(x[1])], 0),
        ("noise", [x], 0),
        ("divmod", [ia, ib], 0),
        ("fdm", [fa, fb], 1e-12),
        ("casts", [big], 0),
        ("wrap", [ia * 40000], 0),
        ("anyall", [x > 1.0], 0),
        ("flipcat", [x], 0),
        ("trig", [x[0] * 3], 2e-6),
    ]


def _bf16(a):
    import ml_dtypes

    return np.asarray(a).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("runtime", _runtimes())
@pytest.mark.parametrize("case", range(len(_cases())), ids=[c[0] for c in _cases()])
def test_runs_like_numpy(runtime, case, reference):
    _usable(runtime)
    name, args, tol = _cases()[case]
    got = getattr(_mod(runtime), name)(*args)
    want = getattr(reference, name)(*args)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if tol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g.astype(np.float64) if g.dtype.kind == "V" else g, w)


@pytest.mark.parametrize("runtime", _runtimes())
def test_dynamic_dims_rebind_and_empty(runtime, reference):
    _usable(runtime)
    mod = _mod(runtime)
    for shape in [(1, 1), (3, 300), (64, 5)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(mod.sm(x), reference.sm(x), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(mod.total(x), reference.total(x), rtol=1e-5)


# ---------------------------------------------------------------------------------------- CLI
def caten_cli(cwd, *args, ok: bool = True):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    if ok:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_c_source_header_and_library(tmp_path):
    _usable("c")
    caten_cli(tmp_path, "-r", "c", "-S", ROOT / "examples" / "axpy.lisp", "-o", "axpy.c")
    assert "int32_t axpy(" in (tmp_path / "axpy.c").read_text()
    assert "int32_t axpy(" in (tmp_path / "axpy.h").read_text()
    caten_cli(tmp_path, "-r", "c", ROOT / "examples" / "axpy.lisp", "-o", "libaxpy.so")
    lib = ctypes.CDLL(str(tmp_path / "libaxpy.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    lib.axpy.argtypes = [fp, fp, fp, fp, ctypes.c_int64]
    lib.axpy.restype = ctypes.c_int32
    a = np.array(2.0, np.float32)
    x, y = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    z = np.empty(5, np.float32)
    ptr = lambda v: v.ctypes.data_as(fp)  # noqa: E731
    assert lib.axpy(ptr(a), ptr(x), ptr(y), ptr(z), 5) == 0
    np.testing.assert_array_equal(z, 2 * x + 1)


def test_c_entry_checks_where_constraints(tmp_path):
    _usable("c")
    src = tmp_path / "rep.lisp"
    src.write_text("(composite halve ((A{f32}[N]) -> (B{f32}[K]) where N = (* 2 K)) (slice A [0 K 1]))\n"
                   "(composite both ((A{f32}[N] B{f32}[M]) -> (C{f32}[N]) where N = M) (+ A B))\n")
    caten_cli(tmp_path, "-r", "c", src, "-e", "both", "-o", "libboth.so")
    lib = ctypes.CDLL(str(tmp_path / "libboth.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    lib.both.argtypes = [fp, fp, fp, ctypes.c_int64, ctypes.c_int64]
    a = np.ones(4, np.float32)
    c = np.empty(4, np.float32)
    assert lib.both(a.ctypes.data_as(fp), a.ctypes.data_as(fp), c.ctypes.data_as(fp), 4, 4) == 0
    assert lib.both(a.ctypes.data_as(fp), a.ctypes.data_as(fp), c.ctypes.data_as(fp), 4, 3) == 1


def test_c_run_cli(tmp_path):
    _usable("c")
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    caten_cli(tmp_path, "run", ROOT / "examples" / "softmax.lisp", "-r", "c", "X=x.npy", "-o", "y.npy")
    y = np.load(tmp_path / "y.npy")
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)


def _ev(expr: str, env: dict) -> int:
    return int(eval(expr, {"__builtins__": {}, "max": max, "min": min}, dict(env)))


def test_opencl_manifest_drives_a_host(tmp_path):
    """Only the .cl file and its manifest: a host that follows the manifest gets the right answer."""
    _usable("opencl")
    import pyopencl as cl

    caten_cli(tmp_path, "-r", "opencl", "-S", ROOT / "examples" / "softmax.lisp", "-e", "softmax-rows", "-o", "k.cl")
    man = json.loads((tmp_path / "k.json").read_text())
    assert man["runtime"] == "opencl"
    (prog,) = man["programs"]
    ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    q = cl.CommandQueue(ctx)
    clp = cl.Program(ctx, (tmp_path / "k.cl").read_text()).build()
    x = np.random.default_rng(3).standard_normal((6, 37)).astype(np.float32)
    env = {"B": 6, "N": 37}
    assert prog["dims"] == ["B", "N"] and prog["inputs"][0]["shape"] == ["B", "N"]
    mf = cl.mem_flags
    bufs = {}
    for b in prog["buffers"]:
        n = max(_ev(b["bytes"], env), 1)
        bufs[b["name"]] = cl.Buffer(ctx, mf.READ_WRITE | (mf.COPY_HOST_PTR if b["role"] == "in" else 0), n,
                                    hostbuf=x if b["role"] == "in" else None)
    assert man["programs"][0]["launches"]
    for ln in prog["launches"]:
        k = cl.Kernel(clp, ln["kernel"])
        args = [bufs[a["name"]] if a["kind"] == "buffer" else np.int64(env[a["name"]]) for a in ln["args"]]
        k.set_args(*args)
        cl.enqueue_nd_range_kernel(q, k, (_ev(ln["global_size"], env),), (ln["local_size"],))
    y = np.empty_like(x)
    cl.enqueue_copy(q, y, bufs["out0"])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_opencl_run_cli(tmp_path):
    _usable("opencl")
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    caten_cli(tmp_path, "run", ROOT / "examples" / "softmax.lisp", "-r", "opencl", "X=x.npy", "-o", "y.npy")
    y = np.load(tmp_path / "y.npy")
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)


# -------------------------------------------------------------------------------------- CUDA
def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not on PATH (CUDA toolkit absent)")
    return path


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_cuda_source_compiles_with_nvcc(tmp_path, example):
    nvcc = _need("nvcc")
    caten_cli(tmp_path, "-r", "cuda", "-S", example, "-D", "T=f32", "-o", "k.cu")
    man = json.loads((tmp_path / "k.json").read_text())
    assert man["runtime"] == "cuda" and man["programs"] and all(p["launches"] for p in man["programs"])
    p = subprocess.run([nvcc, "-ptx", "-arch=compute_80", "k.cu", "-o", "k.ptx"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_cuda_ptx_assembles(tmp_path, example):
    ptxas = _need("ptxas")
    from caten.runtimes import cuda_rt

    if cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None:
        pytest.skip("neither NVRTC (pip install nvidia-cuda-nvrtc) nor nvcc is available")
    caten_cli(tmp_path, "-r", "cuda", "--emit", "asm", example, "-D", "T=f32", "-o", "k.ptx")
    text = (tmp_path / "k.ptx").read_text()
    assert ".entry" in text and (tmp_path / "k.json").exists()
    for arch in ("sm_80", "sm_90"):
        p = subprocess.run([ptxas, f"-arch={arch}", "k.ptx", "-o", f"k_{arch}.cubin"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr


def test_cuda_unavailable_without_gpu_says_why():
    ok, why = R.get("cuda").available()
    if ok:
        pytest.skip("a CUDA GPU is present")
    assert why.startswith("no CUDA GPU") or "CUDA" in why


def test_cuda_nvrtc_in_process():
    from caten.runtimes import cuda_rt

    if cuda_rt.nvrtc_version() is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
    src = "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"
    assert ".entry k" in cuda_rt.nvrtc_ptx(src, "sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(len(_cases())), ids=[c[0] for c in _cases()])
def test_cuda_runs_like_numpy(case, reference):
    _usable("cuda")
    name, args, tol = _cases()[case]
    got = getattr(_mod("cuda"), name)(*args)
    want = getattr(reference, name)(*args)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        if tol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=max(tol, 1e-5), atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("runtime", _runtimes())
def test_sin_of_huge_arguments(runtime):
    # found by the C op-coverage report: the inline polynomial's 4-part reduction gave +-inf
    _usable(runtime)
    mod = caten.loads("(composite s ((A{f32}[N]) -> (C{f32}[N])) (sin A))", runtime=runtime, use_cache=False)
    x = np.array([1e30, -3.4e38, 12345.678, -16384.0, 16383.0, 1e7, 3e5, -1e20, 0.5, np.inf], np.float32)
    got = mod.s(x)
    with np.errstate(invalid="ignore"):
        want = np.sin(x.astype(np.float64))
    fin = np.isfinite(x)
    ulp = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got[fin] - want[fin]) <= 4 * ulp), (got, want)
    assert np.isnan(got[~fin]).all()


@pytest.mark.parametrize("runtime", _runtimes())
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_float_sums_use_partial_sums(runtime, dtype):
    # found by the C and OpenCL op-coverage reports: one serial f32 chain over 33k elements
    # was 660 ulp off numpy's pairwise sum
    _usable(runtime)
    src = f"(composite t ((A{{{dtype}}}[M, N]) -> (C{{{dtype}}}[1, 1])) (sum A :keepdims true))"
    mod = caten.loads(src, runtime=runtime, use_cache=False)
    text = next(iter(pipeline.emit(R.get(runtime), mod.t.program({})[0], "source", Options()).values()))
    assert ("#pragma omp simd reduction(+:" if runtime == "c" else "p_acc") in text
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(5):
        a = rng.standard_normal((257, 129)).astype(np.dtype("float32" if dtype == "f32" else "float64"))
        want = a.astype(np.longdouble).sum()
        got = mod.t(a)[0, 0]
        worst = max(worst, float(abs(got - want) / np.spacing(np.abs(want).astype(a.dtype))))
    assert worst < 64, worst
