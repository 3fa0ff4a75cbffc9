"""`caten tune`: GEMM shape knobs (caten.schedule.plan.KNOBS) chosen by a timed search, kept in
the cache per program and CPU, and used by every later compile of that program there; a knob
changes the kernel's shape, never its values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten import pipeline, target
from caten.cache import default_cache, tuning
from caten.cli.main import cli
from caten.schedule.plan import KNOBS

pytest.importorskip("llvmlite")

MM = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))"
CONV = ("(composite conv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, H, W])) "
        "(conv2d X Wt :padding 1))")
EW = "(composite ew ((X{f32}[N]) -> (Y{f32}[N])) (exp X))"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    return default_cache()


def schedule_text(src: str, cpu: str, arrays: list[np.ndarray], name: str) -> str:
    m = caten.loads(src, runtime="llvm", target=cpu, defines={"M": 50, "K": 30, "N": 40})
    comp = getattr(m, name)
    return pipeline.emit(m.runtime, comp.elaborate(comp._bind_types(arrays)), "schedule",
                         m.options)[".txt"]


@pytest.mark.parametrize("cpu,most,nr", [("rocketlake", 14, 32), ("znver3", 6, 16)])
def test_a_knob_sets_the_tile_within_what_the_registers_hold(cpu, most, nr):
    arrays = [np.zeros((50, 30), np.float32), np.zeros((30, 40), np.float32)]
    assert f"(tiled {most}x{nr} kc 30 " in schedule_text(MM, cpu, arrays, "mm")
    with tuning.trial({"mr": 8, "kc": 16, "mc": 40}):
        text = schedule_text(MM, cpu, arrays, "mm")
    mr = min(8, most)
    assert f"(tiled {mr}x{nr} kc 15 mc {40 // mr * mr} " in text, text  # K=30 in two blocks of 15
    with tuning.trial({"mr": 99}):  # more rows than the accumulators fit: the most that do
        assert f"(tiled {most}x{nr} " in schedule_text(MM, cpu, arrays, "mm")


STRIDED = ("(composite conv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, P, Q])) "
           "(conv2d X Wt :padding 1 :stride 2))")


@pytest.mark.parametrize("cpu,tile", [("rocketlake", "6x64"), ("znver3", "6x16")])
def test_a_packed_convolution_takes_wide_rows_where_the_registers_allow(cpu, tile):
    """A strided convolution packs its image's windows (im2col): four-vector rows on AVX-512."""
    m = caten.loads(STRIDED, runtime="llvm", target=cpu,
                    defines={"N": 2, "C": 8, "H": 12, "W": 12, "O": 16, "P": 6, "Q": 6})
    arrays = [np.zeros((2, 8, 12, 12), np.float32), np.zeros((16, 8, 3, 3), np.float32)]
    text = pipeline.emit(m.runtime, m.conv.elaborate(m.conv._bind_types(arrays)), "schedule", m.options)[".txt"]
    assert f"(tiled {tile} " in text and "direct" not in text, text
    with tuning.trial({"nv": 2}):  # a tuning may still pick the narrow rows
        text = pipeline.emit(m.runtime, m.conv.elaborate(m.conv._bind_types(arrays)), "schedule", m.options)[".txt"]
    assert f"(tiled {'14x32' if cpu == 'rocketlake' else '6x16'} " in text, text


@pytest.mark.parametrize("cpu,tile,tuned", [("rocketlake", "8x32", "6x64"), ("znver3", "6x16", "2x32")])
def test_a_same_convolution_reads_its_image_in_place(cpu, tile, tuned):
    """A stride-1 "same" convolution is direct (caten.schedule.direct): two-vector rows, its 16
    output channels in as few row tiles as the registers allow, shared evenly (2 x 8 on
    AVX-512); a tuning may pick four-vector rows."""
    m = caten.loads(CONV, runtime="llvm", target=cpu, defines={"N": 2, "C": 8, "H": 12, "W": 12, "O": 16})
    arrays = [np.zeros((2, 8, 12, 12), np.float32), np.zeros((16, 8, 3, 3), np.float32)]
    text = pipeline.emit(m.runtime, m.conv.elaborate(m.conv._bind_types(arrays)), "schedule", m.options)[".txt"]
    assert f"(tiled {tile} kc 72 " in text and "direct 9 taps" in text, text
    with tuning.trial({"nv": 4}):
        text = pipeline.emit(m.runtime, m.conv.elaborate(m.conv._bind_types(arrays)), "schedule", m.options)[".txt"]
    assert f"(tiled {tuned} " in text and "direct 9 taps" in text, text


@pytest.mark.parametrize("knobs", [{"mr": 3}, {"mr": 8, "kc": 16}, {"mc": 240, "kc": 64, "l2_pct": 5},
                                   {"mr": 5, "mc": 60, "l2_pct": 95}, {"nv": 4}, {"nv": 4, "mr": 2, "kc": 32},
                                   {"nv": 2}])
def test_every_knob_choice_computes_the_same_products(knobs):
    rng = np.random.default_rng(0)
    m = caten.loads(MM + "\n" + CONV, runtime="llvm", use_cache=False)
    with tuning.trial(knobs):
        for M, K, N in [(1, 7, 13), (13, 127, 7), (127, 1, 1025), (1023, 13, 33), (7, 1000, 127)]:
            a = rng.standard_normal((M, K)).astype(np.float32)
            b = rng.standard_normal((K, N)).astype(np.float32)
            np.testing.assert_allclose(m.mm(a, b), a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(K))
        torch = pytest.importorskip("torch")
        x = rng.standard_normal((2, 5, 13, 7)).astype(np.float32)
        w = rng.standard_normal((9, 5, 3, 3)).astype(np.float32)
        ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
        np.testing.assert_allclose(m.conv(x, w), ref, rtol=1e-4, atol=1e-4)


def test_a_tuned_program_compiles_with_its_knobs_later(cache_dir):
    a = np.random.default_rng(1).standard_normal((64, 48)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((48, 80)).astype(np.float32)
    m = caten.loads(MM, runtime="llvm")
    prog = m.mm.elaborate(m.mm._bind_types([a, b]))
    t = target.resolve(None)
    tuning.save(cache_dir, t, prog.key(), {"mr": 5, "mc": 60}, {"note": "test"})
    fresh = caten.loads(MM, runtime="llvm")  # a later compile of the same program here
    assert "(tiled 5x" in pipeline.emit(fresh.runtime, prog, "schedule", fresh.options)[".txt"]
    np.testing.assert_allclose(fresh.mm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    other = caten.loads(MM.replace("matmul A B", "matmul (* A 2.0) B"), runtime="llvm")
    prog2 = other.mm.elaborate(other.mm._bind_types([a, b]))
    assert "(tiled 5x" not in pipeline.emit(other.runtime, prog2, "schedule", other.options)[".txt"]


def test_a_damaged_tuning_entry_is_ignored(cache_dir):
    t = target.resolve(None)
    cache_dir.put(tuning._key(t, "k"), tuning.KIND, b'{"knobs": [1, 2]}')
    assert tuning.lookup(cache_dir, t, "k") == ()


def test_caten_tune_searches_and_keeps_its_choice(cache_dir, tmp_path):
    f = tmp_path / "mm.lisp"
    f.write_text(MM)
    r = CliRunner().invoke(cli, ["tune", str(f), "-D", "M=96", "-D", "K=64", "-D", "N=80", "--reps", "2"])
    assert r.exit_code == 0, r.output
    assert "caten tune mm" in r.output and "chose " in r.output
    for knob in KNOBS:  # a row of candidates for every knob, after the model's own shapes
        assert any(ln.split("│")[1].strip() == knob for ln in r.output.splitlines() if ln.count("│") > 2), knob
    assert "the host model's shapes" in r.output
    entries = list(cache_dir.root.rglob(f"*.{tuning.KIND}"))
    assert len(entries) == 2  # the program at these sizes, and with its sizes symbolic
    saved = [json.loads(e.read_bytes().split(b"\n", 1)[1]) for e in entries]
    assert saved[0] == saved[1] and set(saved[0]["knobs"]) <= set(KNOBS) and saved[0]["report"]["untuned_ms"] > 0
    a = np.ones((96, 64), np.float32)
    for defines in ({"M": 96, "K": 64, "N": 80}, {}):  # what `caten run -D` and a Python caller compile
        m = caten.loads(MM, runtime="llvm", defines=defines)
        prog = m.mm.elaborate(m.mm._bind_types([a, np.ones((64, 80), np.float32)]))
        assert tuning.lookup(cache_dir, target.resolve(None), prog.key()) == tuple(sorted(saved[0]["knobs"].items()))


def test_caten_tune_says_when_there_is_nothing_to_tune(cache_dir, tmp_path):
    f = tmp_path / "ew.lisp"
    f.write_text(EW)
    r = CliRunner().invoke(cli, ["tune", str(f), "-D", "N=1000"])
    assert r.exit_code == 0 and "no GEMM or convolution to tune" in r.output
    assert not list(cache_dir.root.rglob(f"*.{tuning.KIND}"))


def test_caten_tune_refuses_a_device_runtime(tmp_path):
    f = tmp_path / "mm.lisp"
    f.write_text(MM)
    r = CliRunner().invoke(cli, ["tune", str(f), "-r", "numpy", "-D", "M=4", "-D", "K=4", "-D", "N=4"])
    assert r.exit_code == 1 and "error: caten tune times CPU kernels" in r.output


class FakeRace:
    """Seconds a call of each knob set: 1.0 for the model's, each knob's value a factor; every
    race drifts the whole machine by its own factor (as a shared host does between races)."""

    def __init__(self, factors, drifts):
        self.factors, self.drifts, self.races = factors, list(drifts), []

    def __call__(self, cands, reps):
        drift = self.drifts[len(self.races) % len(self.drifts)]
        self.races.append(cands)
        out = []
        for c in cands:
            t = 1.0
            for k, v in c.items():
                t *= self.factors[(k, v)]
            out.append(t * drift)
        return out


def _cands(values):
    def candidates(knob, best):
        return [dict(best, **{knob: v}) for v in values[knob] if best.get(knob) != v]
    return candidates


def test_the_table_reads_against_the_model_of_its_own_race():
    """Each race holds the model: its row reads 1.00x and every row's "vs untuned" is the model's
    time in the same race over the row's, whatever the drift between races (the first row read
    0.41x when it was set against a later race's model); the one row marked "best so far" in a
    race is the choice after it, and no candidate of the race is faster by the margin."""
    from caten.cli.tune import MARGIN, search

    factors = {("a", 1): 1.2, ("a", 2): 0.5, ("b", 1): 0.8, ("b", 2): 0.98, ("c", 1): 1.5}
    race = FakeRace(factors, drifts=[2.4, 1.0, 0.7, 1.3])
    best, rows, base, cur = search(race, ["a", "b", "c"], _cands({"a": [1, 2], "b": [1, 2], "c": [1]}), 3)
    assert all(r[0] == {} for r in race.races)  # the model in every race
    assert rows[0].candidate.startswith("current:") and rows[0].speedup == pytest.approx(1.0)
    want = {"a": {"a=1": 1 / 1.2, "a=2": 2.0}, "b": {"a=2 b=1": 1 / 0.4, "a=2 b=2": 1 / 0.49},
            "c": {"a=2 b=1 c=1": 1 / 0.6}}
    for r in rows:
        if r.knob in want and not r.candidate.startswith("current"):
            assert r.speedup == pytest.approx(want[r.knob][r.candidate]), r
    for knob in ("a", "b", "c"):
        race_rows = [r for r in rows if r.knob == knob]
        marked = [r for r in race_rows if r.mark == "best so far"]
        assert len(marked) == 1, race_rows
        assert all(r.seconds >= marked[0].seconds * (1 - MARGIN) for r in race_rows)
    assert [r.candidate for r in rows if r.mark == "best so far"] == ["a=2", "a=2 b=1", "current: a=2 b=1"]
    assert best == {"a": 2, "b": 1} and rows[-1].knob == "final" and rows[-1].mark == "chosen"
    assert base / cur == pytest.approx(2.5)


def test_a_candidate_faster_by_less_than_the_margin_is_not_taken_and_says_so():
    from caten.cli.tune import search

    race = FakeRace({("a", 1): 0.97}, drifts=[1.0])
    best, rows, base, cur = search(race, ["a"], _cands({"a": [1]}), 3)
    assert best == {} and base == cur == 1.0
    assert [r.mark for r in rows] == ["best so far", "faster by < 5%: noise"]
