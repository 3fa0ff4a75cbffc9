"""The op-coverage conformance suite behind `caten test-runtime` (LANGUAGE.md section 9).

`cases` generates the cases from the principal-op table and the `ops/` library, `runner`
runs them on a runtime against the numpy reference, `report` writes reports/R.md, R.json
and reports/README.md.
"""

from caten.conformance.cases import DTYPES, Row, build, rows
from caten.conformance.report import to_json, to_markdown, write, write_readme
from caten.conformance.runner import Cell, Result, run_suite

__all__ = ["DTYPES", "Cell", "Result", "Row", "build", "rows", "run_suite", "to_json", "to_markdown", "write",
           "write_readme"]
