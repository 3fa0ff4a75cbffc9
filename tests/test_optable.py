"""The principal-op table is the one place op semantics live (acceptance 5 of the spine)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.ops import TABLE, Op


def test_every_op_has_doc_reference_and_dtypes():
    assert set(TABLE) == set(Op)
    for op, info in TABLE.items():
        assert info.doc and len(info.doc.split()) >= 2, f"{op} lacks a doc line"
        assert callable(info.ref), f"{op} lacks a numpy reference"
        assert info.dtypes, f"{op} applies to no dtype"
        assert info.group in ("unary", "binary", "ternary", "reduce", "memory", "index", "control", "other")


def test_op_count_matches_design():
    assert len(TABLE) == 34  # GATHER, SCATTER, SORT, BITCAST (issue 39); LOOP and IF, whose bodies are sub-graphs (40)


def test_caten_ops_prints_every_table_entry():
    out = subprocess.run([sys.executable, "-m", "caten", "ops"], capture_output=True, text=True, check=True).stdout
    for op, info in TABLE.items():
        line = next(ln for ln in out.splitlines() if ln.split() and ln.split()[0] == op.value)
        assert info.doc in line


def test_interpreter_computes_with_the_table(monkeypatch):
    """Swap ADD's reference in the table: the interpreter must follow (it holds no semantics itself)."""
    from caten.ir import ops as O
    from caten.ir.interpret import evaluate

    a = B.buffer(T.f32, (3,), 0, "a")
    b = B.buffer(T.f32, (3,), 1, "b")
    node = B.alu(Op.ADD, a, b)
    x, y = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
    np.testing.assert_array_equal(evaluate([node], [x, y], {})[0], x + y)
    swapped = O.OpInfo(**{**TABLE[Op.ADD].__dict__, "ref": lambda ctx, p, q: p - q})
    monkeypatch.setitem(O.TABLE, Op.ADD, swapped)
    np.testing.assert_array_equal(evaluate([node], [x, y], {})[0], x - y)


@pytest.mark.parametrize("op", [o for o, i in TABLE.items() if i.group in ("unary", "binary")])
def test_dtype_rule_accepts_exactly_declared_dtypes(op):
    info = TABLE[op]
    for dt in T.ALL:
        try:
            info.dtype_rule([dt] * info.arity, dt)
            ok = True
        except Exception:
            ok = False
        assert ok == (dt in info.dtypes), f"{op} on {dt}"


def test_threefry_known_answers():
    """Random123's published threefry2x32-20 vectors: an oracle independent of caten."""
    from caten.ir.ops import threefry2x32

    def one(key, ctr):
        with np.errstate(over="ignore"):
            x0, x1 = threefry2x32(key, np.array([ctr[0]], np.uint32), np.array([ctr[1]], np.uint32))
        return int(x0[0]), int(x1[0])

    assert one((0, 0), (0, 0)) == (0x6B200159, 0x99BA4EFE)
    assert one((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF)) == (0x1CB996FC, 0xBB002BE7)
    assert one((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3)) == (0xC4923A9C, 0x483DF7A0)
