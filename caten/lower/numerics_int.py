"""Integer IDIV/MOD with floor semantics and threefry2x32-20 in primitive loop-IR ops.

Ported from the LLVM renderer, so bit-identical to what the llvm runtime computed before.
IDIV/MOD follow numpy (floor division; the remainder takes the divisor's sign) and the op
table's rule that x // 0 and x % 0 are 0; INT_MIN // -1 wraps to INT_MIN (the negation wraps).
The truncating `idiv`/`imod` they are built from never see a zero divisor or INT_MIN / -1, so
no target's undefined behaviour or trap is reachable.
"""

from __future__ import annotations

from caten.ir import dtypes as T
from caten.loopir import X
from caten.lower import xops as O

ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def divmod_(a: X, b: X, want_mod: bool) -> X:
    """Floor division (want_mod False) or the floor remainder of two integers of one dtype."""
    dt = a.dtype
    z = O.eq(b, 0)
    if dt.kind == "uint":
        bs = O.where(z, 1, b)
        return O.where(z, 0, (O.trem if want_mod else O.tdiv)(a, bs))
    m1 = O.eq(b, -1)
    bs = O.where(O.or_(z, m1), 1, b)
    q, r = O.tdiv(a, bs), O.trem(a, bs)
    fix = O.and_(O.ne(r, 0), O.lt(O.xor(r, bs), 0))  # a remainder whose sign differs from b's
    if want_mod:
        res = O.where(m1, 0, O.where(fix, O.add(r, bs), r))
    else:
        res = O.where(m1, O.neg(a), O.sub(q, O.cast(fix, dt)))
    return O.where(z, 0, res)


def threefry(ctr: X, seed: int, dyn: X | None = None) -> X:
    """The first u32 word of threefry2x32-20 keyed by `seed` (two 32-bit halves) at counter ctr (i64);
    `dyn`, a u64 known at run time, is XORed into the key (caten.ir.ops.rand_key). Without it the key
    words are constants, so a static seed's code is what it always was."""
    u = T.u32
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    ks: tuple = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    if dyn is not None:
        d0, d1 = O.xor(O.cast(dyn, u), k0), O.xor(O.cast(O.shr(dyn, 32), u), k1)
        ks = (d0, d1, O.xor(O.xor(d0, d1), 0x1BD11BDA))
    c64 = O.cast(ctr, T.u64)
    x0 = O.add(O.cast(c64, u), ks[0])
    x1 = O.add(O.cast(O.shr(c64, 32), u), ks[1])
    for r in range(20):
        x0 = O.add(x0, x1)
        rot = O.or_(O.shl(x1, ROT[r % 8]), O.shr(x1, 32 - ROT[r % 8]))
        x1 = O.xor(rot, x0)
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = O.add(x0, ks[i % 3])
            k = ks[(i + 1) % 3]
            x1 = O.add(x1, (k + i) & 0xFFFFFFFF) if isinstance(k, int) else O.add(O.add(x1, k), i)
    return x0
