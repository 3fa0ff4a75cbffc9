"""The example and benchmark scripts where an optional package is missing: each says so in one
line naming the install and exits 1 at its start -- not with a traceback after an epoch, or
after minutes of another benchmark. The package is hidden by a module of its name, first on the
path, that raises ImportError as a missing one does; nothing but the check runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = [  # (script and arguments, the package hidden, what its message must name)
    (["examples/train_mixer.py", "--torch"], "torch", "pip install 'caten[torch]'"),
    (["examples/train_mixer.py"], "sklearn", "pip install 'caten[train]'"),
    (["examples/mnist_tensor.py"], "sklearn", "pip install 'caten[train]'"),
    (["benchmarks/bench_cuda.py"], "torch", "pip install 'caten[torch]'"),
    (["benchmarks/bench_llvm.py", "--torch-compile"], "torch", "pip install 'caten[torch]'"),
    (["benchmarks/bench_train.py"], "sklearn", "pip install 'caten[train]'"),
    (["benchmarks/bench_opencl.py"], "pyopencl", "pip install 'caten[opencl]'"),
    (["benchmarks/bench_models.py"], "torch", "pip install 'caten[torch]'"),
    (["benchmarks/bench_index.py"], "torch", "pip install 'caten[torch]'"),
    (["benchmarks/bench_models.py"], "torchvision", "pip install 'caten[oracles]'"),
    (["benchmarks/bench_models.py"], "transformers", "pip install 'caten[oracles]'"),
]


@pytest.mark.parametrize("argv,hidden,install", CASES, ids=[f"{c[0][0]}-{c[1]}" for c in CASES])
def test_a_missing_package_is_one_line_at_the_start(tmp_path, argv, hidden, install):
    (tmp_path / f"{hidden}.py").write_text(f"raise ImportError(\"No module named '{hidden}'\")\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and install in lines[0] and argv[0].split("/")[-1] in lines[0], r.stderr
    assert "epoch" not in r.stdout and "|" not in r.stdout  # no work done before the message


def test_the_hiding_module_hides():
    """The shim behaves as a missing package does for the scripts' own checks."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, "torch.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
        r = subprocess.run([sys.executable, "-c", "import torch"], env=dict(os.environ, PYTHONPATH=d),
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "ImportError: No module named 'torch'" in r.stderr
