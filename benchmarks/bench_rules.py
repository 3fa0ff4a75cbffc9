"""Rewrite-engine throughput: a random N-node graph against 50 principal-op rules.

    python benchmarks/bench_rules.py [--nodes 10000] [--reps 5] [--scaling]

The graph mixes elementwise ops over a few inputs with patterns the rules rewrite (x+0, x*1,
-(-x), constant subexpressions, where with a constant condition, ...). The rules are the
built-in -O3 graph rules plus user rules up to 50. Reported: the median time of
`Engine.rewrite` (graph in, rewritten graph out), in ms of wall-clock and of CPU time (the CPU
time is what to compare on a shared, loaded machine). The target is < 200 ms for 10k nodes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from caten.elaborate.elaborator import Elaborator
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import toposort
from caten.ir.ops import Op
from caten.read.program import parse_forms
from caten.read.reader import read
from caten.rewrite import Engine, Explain, builtin_rules, compile_rules, library_names

USER_RULES = """
(defoptimizer mul-two      (MUL ?x 2) => (ADD ?x ?x))
(defoptimizer neg-mul-neg  (MUL (NEG ?x) (NEG ?y)) => (MUL ?x ?y))
(defoptimizer neg-add-neg  (ADD (NEG ?x) (NEG ?y)) => (NEG (ADD ?x ?y)))
(defoptimizer sin-neg      (SIN (NEG ?x)) => (NEG (SIN ?x)))
(defoptimizer lt-self      (CMPLT ?x ?x) => false)
(defoptimizer max-ninf     (MAX ?x -inf) => ?x)
(defoptimizer sqrt-one     (SQRT 1) => 1)
(defoptimizer exp2-zero    (EXP2 0) => 1)
(defoptimizer recip-one    (RECIP 1) => 1)
(defoptimizer where-cmp    (WHERE (CMPLT ?a ?b) ?a ?b) => (NEG (MAX (NEG ?a) (NEG ?b))))
"""


def rules50() -> list:
    """50 rules as the engine indexes them: a class rule (`(?op{binary} ...)`) counts once per op
    of its class, so the per-node work is what 50 single-op rules give."""
    graph_rules = [r for r in builtin_rules(3) if r.level == "op"]
    user = compile_rules(parse_forms(read(USER_RULES, "<bench>"), "<bench>").rules, "bench", library_names())
    rules: list = []
    for r in graph_rules + user:
        if sum(len(q.ops) for q in rules) + len(r.ops) <= 50:
            rules.append(r)
    assert sum(len(r.ops) for r in rules) == 50, [r.name for r in rules]
    return rules


def graph(n: int, seed: int = 0) -> list:
    """Exactly n nodes: random elementwise ops, with rewritable shapes sprinkled in; the outputs
    are the nodes nothing else uses."""
    rnd = random.Random(seed)
    shape = (64,)
    xs = [B.buffer(T.f32, shape, i, f"x{i}") for i in range(8)]
    zero, one, two = (B.const(v, T.f32, shape) for v in (0.0, 1.0, 2.0))
    pool = list(xs)
    made: set = set(toposort(xs + [zero, one, two]))  # generation is not timed
    while True:
        a, b = rnd.choice(pool[-200:]), rnd.choice(pool)
        k = rnd.randrange(16)
        if k == 0:
            y = B.alu(Op.ADD, a, zero)
        elif k == 1:
            y = B.alu(Op.MUL, one, a)
        elif k == 2:
            y = B.alu(Op.NEG, B.alu(Op.NEG, a))
        elif k == 3:
            y = B.alu(Op.ADD, a, B.alu(Op.MUL, two, B.const(float(rnd.randrange(9)), T.f32, shape)))
        elif k == 4:
            y = B.alu(Op.WHERE, B.const(rnd.random() < 0.5, T.bool_, shape), a, b)
        elif k == 5:
            y = B.alu(Op.MUL, a, two)
        elif k in (6, 7):
            y = B.alu(Op.MUL, a, b)
        elif k in (8, 9):
            y = B.alu(Op.ADD, a, b)
        elif k == 10:
            y = B.alu(Op.MAX, a, b)
        elif k == 11:
            y = B.alu(Op.SIN, a)
        elif k == 12:
            y = B.alu(Op.EXP2, B.alu(Op.NEG, a))
        elif k == 13:
            y = B.alu(Op.RECIP, B.alu(Op.ADD, a, one))
        elif k == 14:
            y = B.alu(Op.WHERE, B.alu(Op.CMPLT, a, b), a, b)
        else:
            y = B.alu(Op.SQRT, B.alu(Op.MUL, a, a))
        fresh = [m for m in toposort([y]) if m not in made]
        if len(made) + len(fresh) > n:
            break
        made.update(fresh)
        pool.append(y)
    used = {id(s) for m in made for s in m.src}
    return [m for m in made if id(m) not in used]


def bench(n: int, reps: int, explain: bool = False) -> tuple[int, int, float, float]:
    """(nodes before, nodes after, median wall ms, median CPU ms) of Engine.rewrite over `reps` runs."""
    rules = rules50()
    outs = graph(n)
    size = len(toposort(outs))
    wall, cpu = [], []
    after = 0
    for _ in range(reps):
        eng = Engine(rules, "numpy", Explain() if explain else None)
        eng.elab = Elaborator({})
        t0, c0 = time.perf_counter(), time.process_time()
        new = eng.rewrite(outs, "bench")
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        after = len(toposort(new))
        del new, eng
    return size, after, statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scaling", action="store_true", help="also time 1k, 5k and 20k nodes")
    args = ap.parse_args()
    sizes = [args.nodes] + ([1000, 5000, 20000] if args.scaling else [])
    ok = True
    for n in sizes:
        size, after, ms, cpu = bench(n, args.reps)
        _, _, ms_x, _ = bench(n, max(1, args.reps // 2), explain=True)
        print(f"{size:>7} nodes -> {after:>7} after rewriting, 50 rules: {ms:7.1f} ms wall, {cpu:7.1f} ms CPU "
              f"({cpu / size * 1e3:.1f} us/node; with --explain-rules timing: {ms_x:.1f} ms wall)")
        if n == 10000 and min(ms, cpu) >= 200:
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
