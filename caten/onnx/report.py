"""onnx's backend node tests against caten, and the generated report `reports/onnx.md` + `.json`.

    python -m caten.onnx.report [-r llvm] [-o reports/onnx.md] [-k PATTERN]

Every case of `onnx.backend.test.BackendTest` (kind "node", device CPU) runs in this one process
through `caten.onnx.backend`; compiled code is shared through caten's compile cache. A case's
op type is the op its test is about (an `_expanded` case counts under the op it expands).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from caten.frontends.onnx.handlers import supported_ops

XFAIL_FILE = "tests/onnx_xfail.txt"


@dataclass
class CaseResult:
    case: str
    op: str
    status: str  # pass | fail
    reason: str = ""
    dtypes_ok: bool = True  # every graph input and output is a tensor of a dtype caten has or carries (narrow)


def _short(e: BaseException) -> str:
    """A one-line, run-independent reason (no addresses, no long arrays)."""
    msg = str(e).strip().splitlines()
    first = next((ln.strip() for ln in msg if ln.strip()), "")
    if isinstance(e, AssertionError):
        first = next((ln.strip() for ln in msg if "Mismatch" in ln or "shape" in ln or "dtype" in ln), first)
        first = "wrong result: " + first
    first = re.sub(r"0x[0-9a-f]+", "0x..", first)
    first = re.sub(r"<string>:\d+:\d+: ", "", first)
    return f"{type(e).__name__}: {first}"[:160]


def _dtypes_ok(model) -> bool:
    from caten.frontends.onnx.narrow import carrier_dtype

    vis = list(model.graph.input) + list(model.graph.output)
    return all(v.type.HasField("tensor_type") and carrier_dtype(v.type.tensor_type.elem_type) for v in vis)


def node_cases() -> dict[str, tuple[str, bool]]:
    """Case name -> (the op type it tests, whether its inputs and outputs have caten dtypes)."""
    from onnx.backend.test.loader import load_model_tests

    ops: dict[str, tuple[str, bool]] = {}
    cases = load_model_tests(kind="node")
    for t in cases:
        nodes = t.model.graph.node
        ops[t.name] = (nodes[-1].op_type if nodes else "?", _dtypes_ok(t.model))
    for name in ops:
        base = re.sub(r"_expanded(_ver\d+)?$", "", name)
        if base != name and base in ops:
            ops[name] = (ops[base][0], ops[name][1])
    return ops


def run_cases(runtime: str = "llvm", pattern: str | None = None, verbose: bool = False,
              part: tuple[int, int] | None = None) -> list[CaseResult]:
    """Run the node cases (those whose name matches `pattern`, a regex; with `part` (k, n) those
    whose name's CRC-32 is k mod n) and return one result each."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test

        from caten.onnx import backend as cb

        cb.RUNTIME = runtime
        bt = onnx.backend.test.BackendTest(cb.CatenBackend, __name__)
        ops = node_cases()
    items = bt._test_items["NodeModel"]
    out = []
    for name in sorted(ops):
        if pattern and not re.search(pattern, name) or part and zlib.crc32(name.encode()) % part[1] != part[0]:
            continue
        item = items.get(name + "_cpu")
        if item is None:
            continue
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                item.func(None)
            res = CaseResult(name, ops[name][0], "pass", "", ops[name][1])
        except Exception as e:  # every failure is a result, reported by case
            res = CaseResult(name, ops[name][0], "fail", _short(e), ops[name][1])
        if verbose:
            print(f"{res.status:4} {time.perf_counter() - t0:6.2f}s {name} {res.reason}", file=sys.stderr)
        out.append(res)
    return out


def expandable_ops(ops: set[str]) -> set[str]:
    """Op types without a lowering of their own that onnx defines by a function body (expanded on import)."""
    import onnx

    out = set()
    for op in ops:
        try:
            sc = onnx.defs.get_schema(op)
        except Exception:  # not a standard op
            continue
        if sc.has_function or sc.has_context_dependent_function:
            out.add(op)
    return out


def summarize(results: list[CaseResult]) -> dict:
    sup = supported_ops()
    exp = expandable_ops({r.op for r in results}) - sup
    e_cases = [r for r in results if (r.op in sup or r.op in exp) and r.dtypes_ok]
    e_pass = sum(r.status == "pass" for r in e_cases)
    total, passed = len(results), sum(r.status == "pass" for r in results)
    s_cases = [r for r in results if r.op in sup]
    s_pass = sum(r.status == "pass" for r in s_cases)
    t_cases = [r for r in s_cases if r.dtypes_ok]
    t_pass = sum(r.status == "pass" for r in t_cases)
    return {"cases": total, "passed": passed, "supported_cases": len(s_cases), "supported_passed": s_pass,
            "supported_typed_cases": len(t_cases), "supported_typed_passed": t_pass,
            "with_expanded_typed_cases": len(e_cases), "with_expanded_typed_passed": e_pass}


def write(results: list[CaseResult], md: Path, runtime: str) -> None:
    import onnx

    s = summarize(results)
    sup = supported_ops()
    exp = expandable_ops({r.op for r in results}) - sup
    pct = lambda a, b: f"{100 * a / b:.1f}%" if b else "-"
    by_op: dict[str, list[CaseResult]] = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    lines = [
        f"# ONNX backend node tests on `{runtime}`",
        "",
        f"onnx {onnx.__version__}: `onnx.backend.test.BackendTest` node cases through `caten.onnx.backend` "
        "(generated by `python -m caten.onnx.report`; do not edit).",
        "",
        f"**{s['passed']} of {s['cases']} cases pass ({pct(s['passed'], s['cases'])}); "
        f"{s['supported_passed']} of the {s['supported_cases']} cases whose op type caten's importer supports "
        f"({pct(s['supported_passed'], s['supported_cases'])}); "
        f"{s['supported_typed_passed']} of the {s['supported_typed_cases']} of those whose inputs and outputs are "
        f"tensors of dtypes caten has or carries (float4/e8m0/int2 in f32/i8/u8: docs/import.md) "
        f"({pct(s['supported_typed_passed'], s['supported_typed_cases'])}: the rest are string/optional/sequence "
        "cases).** Counting also the op types without a lowering of "
        "their own that onnx defines by a function body (expanded on import: Attention, the losses, ...), "
        f"{s['with_expanded_typed_passed']} of {s['with_expanded_typed_cases']} cases with caten dtypes pass "
        f"({pct(s['with_expanded_typed_passed'], s['with_expanded_typed_cases'])}). "
        f"Expected failures: `{XFAIL_FILE}` (may only shrink).",
        "",
        "| op type | lowered | cases | pass | fail |",
        "|---|---|---|---|---|",
    ]
    for op in sorted(by_op):
        rs = by_op[op]
        p = sum(r.status == "pass" for r in rs)
        how = "yes" if op in sup else "function body" if op in exp else "no"
        lines.append(f"| {op} | {how} | {len(rs)} | {p} | {len(rs) - p} |")
    fails = [r for r in results if r.status != "pass" and r.op in sup]
    if fails:
        lines += ["", "## Failing cases of supported op types", "", "| case | caten dtypes | reason |", "|---|---|---|"]
        lines += [f"| {r.case} | {'yes' if r.dtypes_ok else 'no'} | {r.reason.replace('|', '/')} |" for r in fails]
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(lines) + "\n")
    data = {"runtime": runtime, "onnx": onnx.__version__, **s,
            "results": [{k: v for k, v in asdict(r).items()} for r in results]}
    md.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m caten.onnx.report", description=__doc__.splitlines()[0])
    ap.add_argument("-r", "--runtime", default="llvm")
    ap.add_argument("-o", "--output", default="reports/onnx.md")
    ap.add_argument("-k", "--pattern", default=None, help="only cases whose name matches this regex")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--write-xfail", action="store_true", help=f"also rewrite {XFAIL_FILE} from this run")
    a = ap.parse_args(argv)
    results = run_cases(a.runtime, a.pattern, a.verbose)
    write(results, Path(a.output), a.runtime)
    s = summarize(results)
    print(f"{s['passed']}/{s['cases']} pass; {s['supported_passed']}/{s['supported_cases']} of supported op types; "
          f"{s['supported_typed_passed']}/{s['supported_typed_cases']} of those with caten dtypes")
    if a.write_xfail:
        write_xfail(results, Path(XFAIL_FILE))
    return 0


def read_xfail(path: Path) -> dict[str, str]:
    """Case name -> the reason noted beside it."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            out[name.strip()] = why.strip()
    return out


def write_xfail(results: list[CaseResult], path: Path) -> None:
    lines = ["# onnx backend node cases caten is expected to fail on llvm (one per line, `# reason`).",
             "# This list may only shrink: tests/test_onnx_node.py fails when a listed case passes.",
             "# Regenerate: python -m caten.onnx.report --write-xfail"]
    lines += [f"{r.case}  # {r.reason}" for r in results if r.status != "pass"]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
