"""docs/tensor.md's list of the torch names caten lacks is generated (caten/cli/unsupported.py)
from torch's own names less caten's, and each listed name has a reason: the committed list is
compared with the generator when torch is installed; the reason rules are checked without it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import caten.nn.functional as CF
import pytest

import caten
from caten.cli import unsupported as U

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tensor.md"


def test_committed_list_is_what_the_generator_writes():
    torch = pytest.importorskip("torch")
    page = PAGE.read_text(encoding="utf-8")
    assert U.BEGIN in page and U.END in page
    if U.committed_version(page) != U.version(torch):
        pytest.skip(f"the list was generated from torch {U.committed_version(page)}, this is {U.version(torch)}")
    # in a fresh process: other tests of the same worker may have added attributes to caten or torch
    code = ("import sys, torch; from caten.cli import unsupported as U; "
            "sys.stdout.write(U.page(open(sys.argv[1], encoding='utf-8').read(), torch))")
    fresh = subprocess.run([sys.executable, "-c", code, str(PAGE)], capture_output=True, text=True, check=True,
                           timeout=300).stdout
    assert page == fresh, ("docs/tensor.md's unsupported torch names are stale: regenerate them with "
                           "`python -m caten.cli.unsupported docs/tensor.md`")


def test_listed_names_are_exactly_what_caten_lacks():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF

    listed: dict[str, set[str]] = {"Tensor": set(), "torch": set(), "F": set()}
    for why, spaces in U.missing(torch).items():
        assert why in U.ORDER, why
        for space, names in spaces.items():
            assert names == sorted(names) and not listed[space] & set(names), (space, names)
            listed[space] |= set(names)
    assert not any(hasattr(caten.Tensor, n) for n in listed["Tensor"])
    assert not any(hasattr(caten, n) for n in listed["torch"])
    assert not any(hasattr(CF, n) for n in listed["F"])
    # and nothing torch has is silently dropped: a public name is provided or listed
    assert {n for n in dir(torch.Tensor) if not n.startswith("_") and not hasattr(caten.Tensor, n)} == listed["Tensor"]
    assert {n for n in dir(TF) if not n.startswith("_") and callable(getattr(TF, n))
            and not isinstance(getattr(TF, n), type) and not hasattr(CF, n)} >= listed["F"]
    text = U.listing(torch)
    assert int(re.match(r"(\d+) ", text).group(1)) == sum(map(len, listed.values()))


@pytest.mark.parametrize("name,has,why", [
    ("abs_", {"abs"}, U.INPLACE),            # an in-place form of an op caten has
    ("abs_", set(), U.NOT_YET),              # ... but not when the plain op is missing too
    ("view_as_real_copy", set(), U.COMPLEX),  # a view's copy twin takes its view's reason
    ("permute_copy", {"permute"}, U.VIEWCOPY),
    ("flipud", set(), U.NOT_YET),            # contains "ipu" but is no device API
    ("pinverse", set(), U.NOT_YET),          # contains "pin" but is no memory API
    ("cuda", set(), U.DEVICE), ("cudnn_convolution", set(), U.DEVICE), ("is_xla", set(), U.DEVICE),
    ("sparse_coo_tensor", set(), U.SPARSE), ("to_sparse_csr", set(), U.SPARSE),
    ("quantize_per_tensor", set(), U.QUANT), ("q_scale", set(), U.QUANT),
    ("as_strided", set(), U.STORAGE), ("untyped_storage", set(), U.STORAGE),
    ("set_num_threads", set(), U.STATE), ("native_layer_norm", set(), U.INTERNAL),
    ("conj", set(), U.COMPLEX), ("polar", set(), U.COMPLEX), ("sym_int", set(), U.SCRIPT),
])
def test_reason_rules(name, has, why):
    assert U.reason(name, has.__contains__) == why


def test_rewrite_regenerates_only_between_the_markers(tmp_path):
    torch = pytest.importorskip("torch")
    page = tmp_path / "t.md"
    page.write_text(f"head\n{U.BEGIN}\nold\n{U.END}\ntail\n", encoding="utf-8")
    assert U.rewrite(str(page))
    assert page.read_text(encoding="utf-8") == f"head\n{U.BEGIN}\n{U.listing(torch)}{U.END}\ntail\n"
