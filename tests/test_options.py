"""caten.options.Options: one object from the CLI and the API to the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.options import Options

SRC = "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf Y (/ X 4.0)))"


def test_unknown_keyword_is_a_diagnostic_naming_the_closest_option():
    with pytest.raises(caten.Error, match=r"unknown option `opt_levle`") as e:
        caten.loads(SRC, opt_levle=3)
    assert "opt_level" in (e.value.hint or "")


def test_api_keywords_reach_the_module_and_the_pipeline():
    mod = caten.loads(SRC, runtime="c", opt_level=0, fast_math=True, use_cache=False, check_bounds=True)
    o = mod.options
    assert (o.runtime, o.opt_level, o.fast_math, o.use_cache, o.check_bounds) == ("c", 0, True, False, True)
    x = np.linspace(-3, 3, 11, dtype=np.float32)
    np.testing.assert_array_equal(mod.f(x), x / np.float32(4))  # x*(1/4) is exact: fast-math changes nothing here


def test_options_of_normalizes_rules_and_keeps_defaults():
    o = Options.of(rules=["a.lisp"], defines=None)
    assert o.rules == ("a.lisp",) and dict(o.defines) == {} and o.runtime == "llvm"
    assert o.but(runtime="c").runtime == "c" and o.runtime == "llvm"
