"""`torchrun --nproc-per-node 2 -m caten run FILE ...` (LANGUAGE.md section 15): each process joins
torchrun's group (127.0.0.1), reads its own shard (`{rank}` in an input's path), and the program's
collectives run across the ranks; rank 0 writes -o OUT, rank r OUT with `.rankR` before the suffix."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_torchrun_runs_a_program_with_collectives(tmp_path, runtime):
    from caten.distributed import free_port

    (tmp_path / "p.lisp").write_text(
        "(composite f ((X{f32}[3, 4]) -> (S{f32}[3, 4]) (G{f32}[6, 4]))\n"
        "  (return (all-reduce X :op sum) (all-gather X :axis 0)))\n")
    xs = [np.random.default_rng(r).standard_normal((3, 4)).astype(np.float32) for r in range(2)]
    for r, x in enumerate(xs):
        np.save(tmp_path / f"x_{r}.npy", x)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--nnodes", "1", "--node-rank", "0",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "caten", "run", "p.lisp",
           "X=x_{rank}.npy", "-o", "out.npz", "-r", runtime]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("out.npz", "out.rank1.npz"):
        got = np.load(tmp_path / name)
        np.testing.assert_allclose(got["S"], xs[0] + xs[1], rtol=1e-6)
        np.testing.assert_array_equal(got["G"], np.concatenate(xs))
