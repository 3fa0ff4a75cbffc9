"""Per-op facts live in the op table (issue 13 item 4): reduce identities, commutativity and
associativity, accepted keywords and cost classes. Each fact is checked against the op's own
numpy reference, and the stages that read it (elaborator, lowering) against numpy results."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import caten
from caten.errors import Error
from caten.ir import dtypes as T
from caten.ir.ops import ARG_KINDS, COMBINERS, FREE, HEAVY, REDUCE_OPS, REDUCERS, TABLE, Ctx, Op

RUNTIMES = ["numpy", "llvm", "c"]
_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, np.inf, -np.inf, np.nan, 1e30, -7.25]


def _values(dt) -> np.ndarray:
    if dt.is_bool:
        return np.array([False, True])
    if dt.is_float:
        with np.errstate(over="ignore"):
            return np.array(_SPECIAL, np.float64).astype(dt.np)
    info = T.iinfo(dt)  # (numpy's iinfo knows no int4)
    return np.array(sorted({int(info.min), int(info.max), 0, 1, 2, 7, int(info.max) // 3}), dt.np)


def _ref(op: Op, dt, *xs: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(TABLE[op].ref(Ctx(None, (), dt, {}, {}), *xs))


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, nan equal to nan, zeros of the same sign."""
    if a.dtype.kind != "f" and a.dtype not in {d.np for d in T.NARROW}:  # (bf16, float8: ml_dtypes' kind V)
        return bool(np.array_equal(a, b))
    x, y = a.astype(np.float64), b.astype(np.float64)
    return bool(np.all((x == y) & (np.signbit(x) == np.signbit(y)) | (np.isnan(x) & np.isnan(y))))


@pytest.mark.parametrize("op", sorted(COMBINERS, key=lambda o: o.value))
def test_combiner_identity_is_neutral_for_every_dtype(op):
    """op(identity, a) == a for every value a the op accepts (the value a reduction starts from)."""
    info = TABLE[op]
    for dt in info.dtypes:
        xs = _values(dt)
        e = np.full(xs.shape, info.identity(dt), dtype=dt.np)
        got = _ref(op, dt, e, xs)
        assert np.array_equal(got.astype(np.float64), xs.astype(np.float64), equal_nan=True), (op, dt, got, xs)


def test_reduce_names_map_to_their_combiners():
    assert set(REDUCE_OPS) == {"add", "mul", "max"}
    for name, op in REDUCERS.items():
        assert TABLE[op].reduces == name and TABLE[op].identity is not None and TABLE[op].associative


@pytest.mark.parametrize("op", [o for o, i in TABLE.items() if i.commutative])
def test_commutative_flag_holds_bit_for_bit(op):
    for dt in TABLE[op].dtypes:
        xs = _values(dt)
        a, b = (np.array(v, dt.np) for v in zip(*itertools.product(xs, xs)))
        assert _bits_equal(_ref(op, dt, a, b), _ref(op, dt, b, a)), (op, dt)


def test_max_is_not_flagged_commutative_because_signed_zeros_differ():
    a, b = np.array([-0.0], np.float32), np.array([0.0], np.float32)
    assert not _bits_equal(_ref(Op.MAX, T.f32, a, b), _ref(Op.MAX, T.f32, b, a))
    assert not TABLE[Op.MAX].commutative


@pytest.mark.parametrize("op", [o for o, i in TABLE.items() if i.associative])
def test_associative_flag_holds_exactly_on_integers(op):
    for dt in (d for d in TABLE[op].dtypes if not d.is_float):
        xs = _values(dt)
        a, b, c = (np.array(v, dt.np) for v in zip(*itertools.product(xs, xs, xs)))
        assert np.array_equal(_ref(op, dt, _ref(op, dt, a, b), c), _ref(op, dt, a, _ref(op, dt, b, c))), (op, dt)


def test_cost_classes():
    for op, info in TABLE.items():
        assert isinstance(info.cost, int) and info.cost >= 0
        assert info.arg in ARG_KINDS, op
    assert all(TABLE[o].arity == 0 or o is Op.VIEW for o in FREE)  # nothing computed: leaves and views
    assert not FREE & HEAVY and Op.ADD not in HEAVY and Op.FDIV in HEAVY


@pytest.mark.parametrize("op,form", [(Op.REDUCE, "(REDUCE x :bogus 1)"), (Op.INDEX, "(INDEX [3] :seed 1)"),
                                     (Op.VIEW, "(VIEW x :bogus [1])"), (Op.ADD, "(ADD x x :axis 0)")])
def test_unknown_keyword_lists_the_table_keywords(op, form):
    src = f"(composite f ((x{{f32}}[3]) -> (y{{f32}}[3])) (return {form}))"
    with pytest.raises(Error) as e:
        caten.loads(src, runtime="numpy")
    msg = f"{e.value} {e.value.hint}"
    assert f"{op.value} takes no :" in msg
    for k in TABLE[op].keywords:
        assert ":" + k in msg
    if not TABLE[op].keywords:
        assert "no keywords" in msg


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt,rop", [("f32", "max"), ("i8", "max"), ("u8", "max"), ("i32", "add"), ("f64", "mul"),
                                    ("bool", "max"), ("i64", "max")])
def test_reduce_starts_from_the_table_identity(rt, dt, rop):
    """A reduction over values below/at the identity's neighbours: a wrong start value shows."""
    src = f"(composite f ((x{{{dt}}}[4, 5]) -> (y{{{dt}}}[4])) (return (REDUCE x :op {rop} :axis 1)))"
    mod = caten.loads(src, runtime=rt)
    tdt = T.lookup(dt)
    rng = np.random.default_rng(3)
    if tdt.is_bool:
        x = rng.random((4, 5)) < 0.3
        x[0] = False
    elif tdt.is_float:
        x = rng.choice(np.array([-2.0, -0.5, -1.0, -4.0, -0.25], tdt.np), size=(4, 5))  # exact products
    else:
        info = np.iinfo(tdt.np)
        x = rng.integers(info.min, min(info.max, 3), size=(4, 5)).astype(tdt.np) if rop == "max" else \
            rng.integers(-3, 4, size=(4, 5)).astype(tdt.np)
        x[0] = info.min if rop == "max" else x[0]
    want = {"max": np.max, "add": np.sum, "mul": np.prod}[rop](x, axis=1).astype(tdt.np)
    np.testing.assert_array_equal(mod.f(x), want)


def test_caten_ops_shows_the_table_facts():
    from caten.cli.info import principal_lines

    lines = {ln.split()[0]: ln for ln in principal_lines()}
    for op, info in TABLE.items():
        line = lines[op.value]
        for k in info.keywords:
            assert ":" + k in line, (op, k)
        assert ("commutative" in line) == info.commutative and ("associative" in line) == info.associative, op
        assert (f"reduce-{info.reduces}" in line) == bool(info.reduces), op
