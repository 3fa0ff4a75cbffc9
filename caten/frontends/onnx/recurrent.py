"""ONNX lowerings of the recurrent layers RNN, GRU and LSTM, as one caten `scan` (both directions).

One step is a few matmuls and activations, written once as the scan's body whatever the sequence
length (which may be a dim symbol: one program serves every length); the input projection of
every step is one matmul up front, sliced by the scan. Every attribute of the standard is
honoured: directions, layout, activations with their alpha/beta (consumed in order by the
functions that take them, as onnxruntime does), clip (on the gates' pre-activations; LSTM's h(C)
unclipped, as onnxruntime), GRU's linear_before_reset, LSTM's input_forget and peepholes, initial
states and sequence_lens (a mask in the body: steps past a sequence's length keep its state and
output zeros, so Y_h is the state at its own last step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from caten.frontends.onnx import loopform
from caten.frontends.onnx.node import N, handler
from caten.frontends.onnx.types import Unsupported

__all__: list[str] = []

_ALPHA = {"affine": None, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": None, "hardsigmoid": 0.2,
          "elu": 1.0}
_BETA = {"affine": None, "scaledtanh": None, "hardsigmoid": 0.5}


def _activation(n: N, name: str, alpha: Any, beta: Any) -> Callable[[str], str]:
    """The caten text of activation `name` (ONNX's RNN activation list) applied to an expression."""
    key = name.lower()
    lit = n.lit
    simple = {"sigmoid": "(sigmoid {x})", "tanh": "(tanh {x})", "relu": "(relu {x})",
              "softsign": "(/ {x} (+ (abs {x}) " + lit(1) + "))", "softplus": "(softplus {x})"}
    if key in simple:
        return lambda x: simple[key].format(x=x)
    if key in _ALPHA and alpha is None or key in _BETA and beta is None:
        raise n.fail(f"activation {name} needs its activation_alpha/activation_beta values")
    a, b = lit(alpha) if alpha is not None else None, lit(beta) if beta is not None else None
    forms: dict[str, Callable[[str], str]] = {
        "affine": lambda x: f"(+ (* {x} {a}) {b})",
        "leakyrelu": lambda x: f"(where (< {x} {lit(0)}) (* {x} {a}) {x})",
        "thresholdedrelu": lambda x: f"(where (> {x} {a}) {x} {lit(0)})",
        "scaledtanh": lambda x: f"(* {a} (tanh (* {x} {b})))",
        "hardsigmoid": lambda x: f"(max (min (+ (* {x} {a}) {b}) {lit(1)}) {lit(0)})",
        "elu": lambda x: f"(where (< {x} {lit(0)}) (* {a} (- (exp {x}) {lit(1)})) {x})",
    }
    if key not in forms:
        raise n.fail(f"activation `{name}` is not one of ONNX's RNN activations")
    return forms[key]


def _clipped(fn: Callable[[str], str], c: str) -> Callable[[str], str]:
    return lambda x: fn(f"(max (min {x} {c}) (- {c}))")


def _activations(n: N, defaults: list[str], ndir: int) -> list[list[Callable[[str], str]]]:
    """Per direction, the activation functions (alpha/beta consumed in order by those that take them).
    clip bounds the gates' pre-activations; LSTM's output activation h(C) is not clipped (onnxruntime's
    reading of the standard, and the only one a model can be checked against)."""
    names = list(n.a("activations") or []) or defaults * ndir
    names = [s.decode() if isinstance(s, bytes) else s for s in names]
    if len(names) == len(defaults) and ndir == 2:
        names = names * 2
    if len(names) != len(defaults) * ndir:
        raise n.fail(f"expects {len(defaults) * ndir} activations, got {names}")
    alphas, betas = list(n.a("activation_alpha") or []), list(n.a("activation_beta") or [])
    fns = []
    clip = n.a("clip")
    for j, name in enumerate(names):
        key = name.lower()
        al = alphas.pop(0) if key in _ALPHA and alphas else _ALPHA.get(key)
        be = betas.pop(0) if key in _BETA and betas else _BETA.get(key)
        fn = _activation(n, name, al, be)
        fns.append(fn if clip is None or j % len(defaults) == 2 else _clipped(fn, n.lit(clip)))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(ndir)]


# one direction: its step (the next states from x_t's projection and the states), its initial
# states, and the projected input of the whole sequence
Step = tuple[Callable[[str, list[str]], list[str]], list[str], str]


class _Rnn:
    """The shared frame: inputs per direction, the step loop with sequence_lens, the outputs."""

    def __init__(self, n: N, gates: int):
        self.n, self.gates = n, gates
        direction = n.a("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise n.fail(f"unknown direction `{direction}`")
        self.dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.layout = n.a("layout", 0)
        s = n.shape(0)
        if len(s) != 3:
            raise n.fail(f"X must be 3-D, got {s}")
        self.T = n.d(0, 1 if self.layout else 0)  # a number, a dim symbol or `(dim X k)`
        self.B = n.d(0, 0 if self.layout else 1)
        if s[1 if self.layout else 0] == 0:
            raise n.fail("an empty sequence is not supported")
        self.H = n.int_shape(2)[-1]
        if n.a("hidden_size") not in (None, self.H) or n.int_shape(1)[0] != len(self.dirs):
            raise n.fail("hidden_size or the number of directions disagrees with W and R")
        self.dt = n.dt(0)
        x = n.x(0)
        self.x = n.let(f"(permute {x} [1 0 2])") if self.layout else x
        self.lens = self._lens()

    def state0(self, i: int, d: int) -> str:
        """The initial hidden/cell state of direction d ([B, H]), zeros when not given."""
        n = self.n
        if not n.has(i):
            return n.let(f"(zeros [{self.B} {self.H}] :dtype {self.dt})")
        v = n.x(i)
        if self.layout:
            v = f"(permute {v} [1 0 2])"
        return n.let(f"(squeeze (slice {v} [{d} {d + 1} 1]) 0)")

    def _lens(self) -> str | None:
        """sequence_lens as i64 (compared with the step index in the body), None when every
        sequence is known to be full length."""
        n = self.n
        if not n.has(4):
            return None
        try:
            if np.all(np.asarray(n.c(4, "sequence_lens")).reshape(-1) == int(self.T)):
                return None
        except (Unsupported, ValueError):  # a run-time sequence_lens or length: masked in the body
            pass
        return n.let(f"(cast {n.x(4)} i64)")

    def weights(self, d: int) -> tuple[str, str]:
        """W[d] and R[d] transposed, for `x @ W^T` and `h @ R^T`."""
        n = self.n
        w = n.let(f"(transpose (squeeze (slice {n.x(1)} [{d} {d + 1} 1]) 0))")
        r = n.let(f"(transpose (squeeze (slice {n.x(2)} [{d} {d + 1} 1]) 0))")
        return w, r

    def cut(self, v: str, k: int) -> str:
        """Gate k of a [..., gates*H] value."""
        h = self.H
        return f"(slice {v} [0 {self.B} 1] [{k * h} {(k + 1) * h} 1])"

    def run(self, specs: list[Step]) -> tuple[list[str], list[list[str]]]:
        """Every direction in one scan: specs[d] is (step, initial states, xw [T, B, gates*H]).
        Returns Y of each direction ([T, B, H]) and its final states. A lone reverse direction
        runs the scan backwards; beside a forward one its inputs and Y are flipped. With
        sequence_lens each direction's step index is scanned too and masks the step."""
        n, g = self.n, self.n.g
        whole = len(specs) == 1 and self.dirs[0] == "reverse"
        flip = [self.dirs[d] == "reverse" and not whole for d in range(len(specs))]
        xs = [n.let(f"(flip {xw} :axis 0)") if fl else xw for (_, _, xw), fl in zip(specs, flip)]
        zero = None
        if self.lens is not None:
            zero = n.let(f"(zeros [{self.B} {self.H}] :dtype {self.dt})")
            t = n.let(f"(arange {self.T})")
            back = n.let(f"(flip {t} :axis 0)") if any(flip) else t
            xs += [back if fl else t for fl in flip]
        counts = [len(st) for _, st, _ in specs]

        def body(cs: list[str], xv: list[str]) -> tuple[list[str], list[str]]:
            nxt, ys = [], []
            for d, (step, _, _) in enumerate(specs):
                mine = cs[sum(counts[:d]):sum(counts[:d + 1])]
                new = [n.let(v) for v in step(xv[d], mine)]
                if self.lens is None:
                    nxt += new
                    ys.append(new[0])
                    continue
                m = n.let(f"(unsqueeze (> {self.lens} {xv[len(specs) + d]}) 1)")
                nxt += [n.let(f"(where {m} {a} {b})") for a, b in zip(new, mine)]
                ys.append(n.let(f"(where {m} {new[0]} {zero})"))
            return nxt, ys

        fin, ys = loopform.scan(g, [v for _, st, _ in specs for v in st], xs, body, reverse=whole)
        ys = [n.let(f"(flip {y} :axis 0)") if fl else y for y, fl in zip(ys, flip)]
        return ys, [fin[sum(counts[:d]):sum(counts[:d + 1])] for d in range(len(specs))]

    def outputs(self, ys: list[str], finals: list[list[str]]) -> list[str | None]:
        """Y [T, D, B, H] (layout 1: [B, T, D, H]) and each final state [D, B, H] (layout 1: [B, D, H])."""
        n = self.n
        y = f"(concat {' '.join(f'(unsqueeze {v} 1)' for v in ys)} :axis 1)"
        outs: list[str | None] = [f"(permute {y} [2 0 1 3])" if self.layout else y]
        for k in range(len(finals[0])):
            s = f"(concat {' '.join(f'(unsqueeze {f[k]} 0)' for f in finals)} :axis 0)"
            outs.append(f"(permute {s} [1 0 2])" if self.layout else s)
        return [o if i < len(n.node.output) and n.node.output[i] else None for i, o in enumerate(outs)]

    def projected(self, w: str, bias: str | None) -> str:
        """x @ W^T (+ bias) for the whole sequence, one matmul: [T, B, gates*H]."""
        xw = f"(matmul {self.x} {w})"
        return self.n.let(xw if bias is None else f"(+ {xw} {bias})")


def _bias(f: _Rnn, d: int, k: int) -> tuple[str | None, str | None]:
    """(Wb, Rb) of direction d, each [k*H], or None without B."""
    n, h = f.n, f.H
    if not n.has(3):
        return None, None
    b = n.x(3)
    wb = n.let(f"(squeeze (slice {b} [{d} {d + 1} 1] [0 {k * h} 1]) 0)")
    rb = n.let(f"(squeeze (slice {b} [{d} {d + 1} 1] [{k * h} {2 * k * h} 1]) 0)")
    return wb, rb


def _add_bias(n: N, wb: str | None, rb: str | None) -> str | None:
    return None if wb is None else n.let(f"(+ {wb} {rb})")


def _directions(f: _Rnn, one: Callable[[int], Step]) -> list[str | None]:
    return f.outputs(*f.run([one(d) for d in range(len(f.dirs))]))


@handler("RNN")
def _rnn(n: N) -> list[str | None]:
    f = _Rnn(n, 1)
    acts = _activations(n, ["Tanh"], len(f.dirs))

    def one(d: int) -> Step:
        w, r = f.weights(d)
        xw = f.projected(w, _add_bias(n, *_bias(f, d, 1)))
        act = acts[d][0]
        return lambda xt, s: [act(f"(+ {xt} (matmul {s[0]} {r}))")], [f.state0(5, d)], xw

    return _directions(f, one)


@handler("GRU")
def _gru(n: N) -> list[str | None]:
    f = _Rnn(n, 3)
    acts = _activations(n, ["Sigmoid", "Tanh"], len(f.dirs))
    lbr, h = n.a("linear_before_reset", 0), f.H

    def one(d: int) -> Step:
        w, r = f.weights(d)
        wb, rb = _bias(f, d, 3)
        xw = f.projected(w, wb)
        fa, ga = acts[d]
        r_zr = n.let(f"(slice {r} [0 {h} 1] [0 {2 * h} 1])")
        r_h = n.let(f"(slice {r} [0 {h} 1] [{2 * h} {3 * h} 1])")
        rbh = None if rb is None else n.let(f"(slice {rb} [{2 * h} {3 * h} 1])")
        rb_zr = None if rb is None else n.let(f"(slice {rb} [0 {2 * h} 1])")

        def step(xt: str, s: list[str]) -> list[str]:
            hp = s[0]
            zr = f"(+ (slice {xt} [0 {f.B} 1] [0 {2 * h} 1]) (matmul {hp} {r_zr}))"
            zr = n.let(zr if rb_zr is None else f"(+ {zr} {rb_zr})")
            z = n.let(fa(f.cut(zr, 0)))
            rr = n.let(fa(f.cut(zr, 1)))
            xh = f.cut(xt, 2)
            if lbr:
                hh = f"(matmul {hp} {r_h})" if rbh is None else f"(+ (matmul {hp} {r_h}) {rbh})"
                pre = f"(+ {xh} (* {rr} {hh}))"
            else:
                pre = f"(+ {xh} (matmul (* {rr} {hp}) {r_h}))"
                if rbh is not None:
                    pre = f"(+ {pre} {rbh})"
            cand = n.let(ga(pre))
            return [f"(+ (* (- {n.lit(1)} {z}) {cand}) (* {z} {hp}))"]

        return step, [f.state0(5, d)], xw

    return _directions(f, one)


@handler("LSTM")
def _lstm(n: N) -> list[str | None]:
    f = _Rnn(n, 4)
    acts = _activations(n, ["Sigmoid", "Tanh", "Tanh"], len(f.dirs))
    forget, h = n.a("input_forget", 0), f.H

    def one(d: int) -> Step:
        w, r = f.weights(d)
        xw = f.projected(w, _add_bias(n, *_bias(f, d, 4)))
        fa, ga, ha = acts[d]
        p_i = p_o = p_f = None
        if n.has(7):
            p_i, p_o, p_f = (n.let(f"(squeeze (slice {n.x(7)} [{d} {d + 1} 1] [{k * h} {(k + 1) * h} 1]) 0)")
                             for k in range(3))

        def peep(v: str, p: str | None, c: str) -> str:
            return v if p is None else f"(+ {v} (* {p} {c}))"

        def step(xt: str, s: list[str]) -> list[str]:
            hp, cp = s
            gates = n.let(f"(+ {xt} (matmul {hp} {r}))")
            i = n.let(fa(peep(f.cut(gates, 0), p_i, cp)))
            fg = n.let(f"(- {n.lit(1)} {i})") if forget else n.let(fa(peep(f.cut(gates, 2), p_f, cp)))
            c = n.let(f"(+ (* {fg} {cp}) (* {i} {ga(f.cut(gates, 3))}))")
            o = n.let(fa(peep(f.cut(gates, 1), p_o, c)))
            return [f"(* {o} {ha(c)})", c]

        return step, [f.state0(5, d), f.state0(6, d)], xw

    return _directions(f, one)
