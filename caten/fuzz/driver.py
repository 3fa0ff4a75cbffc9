"""`caten fuzz`: generate, check and, on a failure, shrink and print; used by the CLI and by
tests/test_fuzz_programs.py (a fixed-seed slice in CI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from caten.fuzz.check import Outcome, Target, Worker, check, make_inputs
from caten.fuzz.gen import ENTRY, generate, render
from caten.fuzz.shrink import shrink
from caten.fuzz.types import Prog, infer

DEFAULT_TARGETS = "llvm+bounds,c+bounds,llvm"


@dataclass
class Finding:
    seed: int
    target: Target
    kind: str
    detail: str
    source: str  # the shrunk program
    original: str

    def report(self) -> str:
        return (f"seed {self.seed}: {self.kind} on {self.target}: {self.detail}\n"
                f"minimal program:\n{self.source}")


@dataclass
class Summary:
    programs: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)  # the reference refused: a generator bug
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    last_seed: int | None = None


def run_one(seed: int, targets: list[Target], worker: Worker) -> tuple[Prog, str, list[Outcome]]:
    prog = generate(seed)
    src = render(prog)
    return prog, src, check(src, ENTRY, make_inputs(prog, seed), targets, worker, has_f32(prog))


def has_f32(prog: Prog) -> bool:
    return any(t.dtype == "f32" for t in infer(prog).values())


def _fails_like(seed: int, target: Target, kind: str, worker: Worker) -> Callable[[Prog], bool]:
    def fails(q: Prog) -> bool:
        try:
            out = check(render(q), ENTRY, make_inputs(q, seed), [target], worker, has_f32(q))
        except Exception:  # noqa: BLE001 - the reference refused the variant: not the same failure
            return False
        return out[0].kind == kind
    return fails


def fuzz(seeds, targets: list[Target], shrink_budget: int = 60, log: Callable[[str], None] | None = None,
         deadline: float | None = None, stop_first: bool = False) -> Summary:
    """Check the programs of `seeds` on `targets`; each failure is shrunk and recorded (with
    `stop_first`, the run ends after the first program that fails)."""
    worker = Worker()
    summary = Summary()
    t0 = time.time()
    seen: set[tuple[str, str]] = set()
    try:
        for seed in seeds:
            if deadline is not None and time.time() > deadline:
                break
            try:
                prog, src, outcomes = run_one(seed, targets, worker)
            except Exception as e:  # noqa: BLE001
                summary.rejected.append((seed, f"{type(e).__name__}: {e}"))
                continue
            summary.programs += 1
            for o in outcomes:
                if o.kind == "ok":
                    continue
                small, detail = prog, o.detail
                try:
                    small = shrink(prog, _fails_like(seed, o.target, o.kind, worker), shrink_budget)
                    again = check(render(small), ENTRY, make_inputs(small, seed), [o.target], worker,
                                  has_f32(small))[0]
                    detail = again.detail if again.kind == o.kind else o.detail
                except Exception as e:  # noqa: BLE001 - a fuzzer bug must not end the run: report unshrunk
                    detail += f" (shrinking failed: {type(e).__name__}: {e})"
                f = Finding(seed, o.target, o.kind, detail, render(small), src)
                summary.findings.append(f)
                key = (str(o.target), o.kind)
                if log:
                    log(f.report() + ("" if key not in seen else "(same kind as an earlier finding)\n"))
                seen.add(key)
            summary.last_seed = seed
            if stop_first and summary.findings:
                break
    finally:
        worker.stop()
        summary.seconds = time.time() - t0
    return summary
