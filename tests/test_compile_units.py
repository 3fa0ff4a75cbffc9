"""Per-unit compile (caten.render.llvm.units, caten.compile.jobs): a module splits into one LLVM
module per kernel stage, kernel, tile function and thread pool plus the entries; each unit is
cached by content (editing one stage recompiles only what contains or calls it) and compiled on
several processes, with the same object code as compiled here."""

from __future__ import annotations

import os

import numpy as np
import pytest

import caten
from caten import target
from caten.cache.store import default_cache
from caten.compile import jobs, llvmobj
from caten.render.llvm import units

pytest.importorskip("llvmlite")

NORM = """
(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N]))
  (setf m (mean X :axis 1 :keepdims true))
  (setf c (- X m))
  (setf v (mean (* c c) :axis 1 :keepdims true))
  (setf y (/ c (sqrt (+ v 1e-5))))
  (return (* y SCALE)))
"""


def norm_ref(x: np.ndarray, scale: float) -> np.ndarray:
    c = x - x.mean(1, keepdims=True)
    return c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-5) * scale


def module_text(src: str, entry: str = "f") -> str:
    from caten.pipeline import emit

    mod = caten.loads(src, runtime="llvm")
    return next(iter(emit(mod.runtime, getattr(mod, entry).elaborate({}), "source").values()))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    return default_cache()


def test_the_mixer_splits_into_units_that_each_compile():
    src = open(os.path.join(os.path.dirname(__file__), "..", "examples", "mlp_mixer.lisp")).read()
    text = module_text(src, "mixer_block")
    parts = units.split(text)
    assert parts is not None and len(parts) > 10
    names = [u.name for u in parts]
    assert len(set(names)) == len(names)
    assert sum(u.light for u in parts) == 2  # the entries and the thread pool
    t = target.host()
    for u in parts:
        assert u.text.count(f"define void @{u.name}(") == 1 or u.name.endswith("__impl")
        llvmobj.optimize(u.text, t.cpu, t.features, 0)  # parses and verifies alone
    again = units.split(module_text(src, "mixer_block"))
    assert [u.key for u in again] == [u.key for u in parts]


def test_editing_one_stage_recompiles_only_what_holds_or_calls_it(cache_dir):
    x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    stats = cache_dir.stats.by_kind
    y = caten.loads(NORM.replace("SCALE", "2.0"), runtime="llvm").f(x)
    np.testing.assert_allclose(y, norm_ref(x, 2.0), rtol=1e-5, atol=1e-5)
    hits, first = stats["llvmunit"]
    assert hits == 0 and first >= 3
    y = caten.loads(NORM.replace("SCALE", "3.0"), runtime="llvm").f(x)
    np.testing.assert_allclose(y, norm_ref(x, 3.0), rtol=1e-5, atol=1e-5)
    hits, misses = stats["llvmunit"]
    assert hits >= 1 and misses - first < first  # the pool and the untouched stages came from the cache


def test_workers_compile_the_same_object_code_as_this_process():
    t = target.host()
    parts = units.split(module_text(NORM.replace("SCALE", "4.0")))
    objs = jobs.compile_units(parts, t.cpu, t.features, 3, None, "test", cores=2)
    assert any(w.alive() for w in jobs._workers)
    for u, o in zip(parts, objs):
        assert o == llvmobj.compile_object(u.text, t.cpu, t.features, 3, u.light)


def test_a_unit_that_fails_raises_llvm_s_error_here():
    t = target.host()
    good = units.split(module_text(NORM.replace("SCALE", "5.0")))
    bad = units.Unit("caten_ubroken", good[0].text.replace("ret void", "ret i32 0", 1), "broken", False)
    with pytest.raises(RuntimeError, match="LLVM|ret"):
        jobs.compile_units([bad] + good, t.cpu, t.features, 3, None, "test", cores=2)


def test_programs_sharing_a_stage_link_it_once_and_both_run(cache_dir):
    x = np.random.default_rng(1).standard_normal((3, 11)).astype(np.float32)
    a = caten.loads(NORM.replace("SCALE", "6.0"), runtime="llvm").f
    b = caten.loads(NORM.replace("SCALE", "7.0"), runtime="llvm").f
    np.testing.assert_allclose(b(x), norm_ref(x, 7.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a(x), norm_ref(x, 6.0), rtol=1e-5, atol=1e-5)


def module(b_global: str) -> str:
    return "\n".join([
        "@g = internal global i64 0", "@h = internal global i64 0",
        "; unit", "define internal void @a() #1 {", "entry:", "  store i64 1, ptr @g", "  ret void", "}",
        "; unit", "define internal void @b() #1 {", "entry:", f"  store i64 2, ptr @{b_global}", "  ret void", "}",
        "define void @e() #0 {", "entry:", "  call void @a()", "  call void @b()", "  ret void", "}",
        "attributes #0 = { nounwind }", "attributes #1 = { noinline nounwind }"])


def test_a_module_with_state_shared_between_units_stays_whole():
    assert units.split(module("g")) is None
    parts = units.split(module("h"))
    assert [u.light for u in parts] == [False, False, True] and parts[-1].name == "e"
    t = target.host()
    for u in parts:
        llvmobj.optimize(u.text, t.cpu, t.features, 0)


def test_compile_jobs_sets_how_many_processes_compile(monkeypatch):
    monkeypatch.setenv("CATEN_COMPILE_JOBS", "1")
    assert jobs.processes(4) == 1
    before = [w for w in jobs._workers if w.alive()]
    t = target.host()
    parts = units.split(module_text(NORM.replace("SCALE", "8.0")))
    objs = jobs.compile_units(parts, t.cpu, t.features, 3, None, "test", cores=4)  # this process alone
    assert len(objs) == len(parts) and all(o[:4] == b"\x7fELF" for o in objs)
    assert [w for w in jobs._workers if w.alive()] == before  # none started
    monkeypatch.setenv("CATEN_COMPILE_JOBS", "many")  # not a number: the cores
    assert jobs.processes(3) == 3


ONE_SUM = """(composite f ((X{f32}[N, M]) (Y{f32}[K, J]) -> (A{f32}[N, 1]))
  (return (sum (exp X) :axis 1 :keepdims true)))"""
TWIN_SUMS = """(composite f ((X{f32}[N, M]) (Y{f32}[K, J]) -> (A{f32}[N, 1], B{f32}[K, 1]))
  (return (sum (exp X) :axis 1 :keepdims true) (sum (exp Y) :axis 1 :keepdims true)))"""


def test_twin_stages_over_other_dims_and_buffers_are_one_unit():
    """A stage takes the dims and buffers it reads, ordered by its structure
    (caten.lower.dimargs): the second row-sum, over Y[K, J] where the first reads X[N, M], is the
    same code and adds no unit (names order a product's operands, so the twins here have names
    that sort alike: J < K as M < N)."""
    one, two = units.split(module_text(ONE_SUM)), units.split(module_text(TWIN_SUMS))
    assert len(two) == len(one) and [u.key for u in two[:-1]] == [u.key for u in one[:-1]]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    y = rng.standard_normal((9, 3)).astype(np.float32)
    a, b = caten.loads(TWIN_SUMS, runtime="llvm").f(x, y)  # the shared code, called with each one's dims
    np.testing.assert_allclose(a, np.exp(x).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(b, np.exp(y).sum(1, keepdims=True), rtol=1e-5)


def test_the_mixer_s_gemm_stages_share_one_tile_function():
    """The Mixer's four GEMM stages each call the module's one tile function: a thread's packing
    slot is sized without the kernel's other GEMMs' dims (plan.thread_slots), so the tiles do
    not differ by slot. (The channel-mixing GEMMs were one unit until each carried its own
    epilogue, GELU and the residual add: caten.lower.epilogue.)"""
    import re

    src = open(os.path.join(os.path.dirname(__file__), "..", "examples", "mlp_mixer.lisp")).read()
    parts = units.split(module_text(src, "mixer_block"))
    tiles = {m[1] for u in parts for m in re.finditer(r"define void @(\w+)\(ptr noalias %b_A, ptr noalias %b_B",
                                                             u.text)}
    assert len(tiles) == 1
    tile = tiles.pop()
    callers = [u.name for u in parts if re.search(rf"call void @{tile}\(", u.text)]
    assert len(callers) == 4, callers


def test_the_unit_key_ignores_the_order_of_a_commutative_op_s_operands():
    body = ("define void @f(i64 %a, i64 %b, ptr %p) #1 {{\nentry:\n  %t = {} i64 {}\n"
            "  store i64 %t, ptr %p\n  ret void\n}}")
    key = lambda op, args: units._canonical(body.format(op, args), ["f"])  # noqa: E731
    assert key("mul", "%a, %b") == key("mul", "%b, %a")
    assert key("add nuw nsw", "%b, 13") == key("add nuw nsw", "13, %b")
    assert key("sub", "%a, %b") != key("sub", "%b, %a")  # not commutative: different code
    assert key("mul", "%a, %b") != key("add", "%a, %b")


def test_a_unit_s_object_is_cached_under_the_compile_settings_that_made_it(cache_dir, monkeypatch):
    """Objects made under other pass or code generator settings (an older caten's llvmobj) are
    not reused for the same IR: the unit key holds the settings' hash."""
    t = target.host()
    parts = units.split(module_text(NORM.replace("SCALE", "10.0")))
    stats = cache_dir.stats.by_kind
    jobs.compile_units(parts, t.cpu, t.features, 3, cache_dir, "test", cores=1)
    assert stats["llvmunit"] == [0, len(parts)]
    jobs.compile_units(parts, t.cpu, t.features, 3, cache_dir, "test", cores=1)
    assert stats["llvmunit"] == [len(parts), len(parts)]
    monkeypatch.setattr(llvmobj, "settings_key", lambda: "other settings")
    jobs.compile_units(parts, t.cpu, t.features, 3, cache_dir, "test", cores=1)
    assert stats["llvmunit"] == [len(parts), 2 * len(parts)]
