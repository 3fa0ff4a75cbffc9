"""The cache of elaborated programs is keyed by the code of every module the front end can run; a
module the front end loads but the key leaves out would serve stale programs after an edit (it
did: gradients built by caten/autodiff, and caten/driver.py itself, were cached under keys that
ignored their code). tests/test_cache_keys.py checks the keys against the static import graph;
this checks them against what a compile really loads."""

import json
import subprocess
import sys

_PROBE = """
import json, sys
from caten.cache import fingerprint as F
from caten.pipeline import front
src = front.read(sys.argv[1])
types, dims = front.split_defines({"B": 4, "D": 3, "K": 2})
for n in src.names:
    front.compile_program(src, src.entry(n), types, dims)
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.startswith("caten.")),
                  "covered": sorted(F.closure(front.ROOTS))}))
"""

SRC = """
(composite loss ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (L{f32}))
  (cross-entropy (matmul X W) Y))
(composite step ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (L{f32}, W2{f32}[D, K]))
  (setf lg (value-and-grad loss X W Y :wrt W))
  (return (nth lg 0) (sgd-update W (nth lg 1) :lr 0.1)))
"""


def test_every_module_a_compile_loads_is_in_the_fingerprint(tmp_path):
    f = tmp_path / "step.lisp"
    f.write_text(SRC)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(f)], capture_output=True, text=True, check=True).stdout
    res = json.loads(out)
    data = {"caten.ops", "caten.grammar"}  # packages of data files, which the fingerprint hashes as text
    missing = sorted(set(res["loaded"]) - set(res["covered"]) - data)
    assert not missing, f"loaded by a compile but not in the program-cache fingerprint: {missing}"
    assert {"caten.autodiff.builder", "caten.rewrite.engine", "caten.elaborate.grad"} <= set(res["loaded"])
