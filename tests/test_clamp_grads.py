"""clamp, hardtanh and relu6 at their bounds, against torch (>= 2.14, whose clamp passes no
gradient at a scalar bound and halves it at a tensor bound's tie): the value keeps x (and -0.0),
the gradient is torch's at the bounds, beyond them and at nan."""

from __future__ import annotations

import caten.nn.functional as F
import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")
if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
    pytest.skip("torch < 2.14 passes clamp's gradient at the bounds", allow_module_level=True)

XS = [-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 6.0, 7.0, float("nan")]
ZEROS, ONES = np.zeros(len(XS), "f4"), np.ones(len(XS), "f4")
CASES = {
    "clamp(0, 1)": (lambda x: x.clamp(0, 1), lambda x: x.clamp(0, 1)),
    "clamp(min=0)": (lambda x: x.clamp(min=0), lambda x: x.clamp(min=0)),
    "clamp(max=1)": (lambda x: x.clamp(max=1), lambda x: x.clamp(max=1)),
    "clamp(1, 1)": (lambda x: x.clamp(1, 1), lambda x: x.clamp(1, 1)),
    "clamp(2, 1)": (lambda x: x.clamp(2, 1), lambda x: x.clamp(2, 1)),
    "clamp(tensors)": (lambda x: x.clamp(torch.tensor(ZEROS), torch.tensor(ONES)),
                       lambda x: x.clamp(caten.Tensor(ZEROS, runtime=x.runtime),
                                         caten.Tensor(ONES, runtime=x.runtime))),
    "hardtanh(0, 1)": (lambda x: torch.nn.functional.hardtanh(x, 0.0, 1.0), lambda x: F.hardtanh(x, 0.0, 1.0)),
    "relu6": (torch.nn.functional.relu6, F.relu6),
}


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("name", list(CASES))
def test_value_and_gradient_at_the_bounds_match_torch(name, runtime):
    tf, cf = CASES[name]
    t = torch.tensor(XS, requires_grad=True)
    ty = tf(t)
    ty.sum().backward()
    c = caten.Tensor(np.array(XS, "f4"), requires_grad=True, runtime=runtime)
    cy = cf(c)
    cy.sum().backward()
    want, got = ty.detach().numpy(), cy.numpy()
    if name != "clamp(tensors)":  # (the sign of maximum(-0.0, 0.0) is the MAX op's, per runtime)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0
    np.testing.assert_allclose(got, want, equal_nan=True)
    np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())
