"""torch habits on `caten.Tensor` (issue 44): each habit is one line of code run twice, once with
`L = caten` and once with `L = torch`, on the same inputs, and the results must agree: values,
dtypes and shapes of tensors (through (values, indices) pairs and tuples), Python values as
returned, `str()` of printed tensors (torch's `torch.` dtype prefix read as `caten.`), and the
gradients of the habits that call `backward()`. Random habits compare shape and dtype only.

The forward habits of a group are realized by one caten program (on the numpy runtime), so the
probe is fast; a few run on llvm too. Tolerance: exact for everything on the 0.25-grid inputs
below except the habits marked `approx` (a quotient, a square root, exp/log), within 1e-6
relative. The table of docs/tensor.md is checked against the generator here as well.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import caten
from caten.tensor import torchnames
from caten.tensor.realize import realize
from caten.tensor.torchnames import REGISTRY, table

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
A = np.array([[1.0, -2.0, 3.5], [4.0, 5.25, -6.0]], np.float32)
B = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5) / 4
I = np.array([[3, -1, 4], [1, -5, 9]], np.int64)  # noqa: E741
V = np.array([0.5, -1.5, 2.0, 7.25], np.float32)
M = np.array([[1.0, 0.0], [-2.0, 3.0], [0.5, 4.0]], np.float32)


def inputs(L):
    return L.tensor(A), L.tensor(B), L.tensor(I), L.tensor(V)


# name -> (habit, how to compare: "exact", "approx", "shape"); a, b, i, v are the inputs above
FORWARD = {
    # creation
    "zeros(2, 3)": (lambda L, a, b, i, v: L.zeros(2, 3), "exact"),
    "zeros((2, 3))": (lambda L, a, b, i, v: L.zeros((2, 3)), "exact"),
    "ones(2, 3, dtype=int64)": (lambda L, a, b, i, v: L.ones(2, 3, dtype=L.int64), "exact"),
    "full((2, 2), 1.5)": (lambda L, a, b, i, v: L.full((2, 2), 1.5), "exact"),
    "full((2,), 7)": (lambda L, a, b, i, v: L.full((2,), 7), "exact"),
    "empty(2, 3).shape": (lambda L, a, b, i, v: L.empty(2, 3), "shape"),
    "rand(2, 3)": (lambda L, a, b, i, v: L.rand(2, 3), "shape"),
    "randn(4, 3)": (lambda L, a, b, i, v: L.randn(4, 3), "shape"),
    "randn(4, 3, dtype=float64)": (lambda L, a, b, i, v: L.randn(4, 3, dtype=L.float64), "shape"),
    "zeros_like": (lambda L, a, b, i, v: L.zeros_like(i), "exact"),
    "ones_like": (lambda L, a, b, i, v: L.ones_like(a), "exact"),
    "full_like": (lambda L, a, b, i, v: L.full_like(a, 2.5), "exact"),
    "rand_like": (lambda L, a, b, i, v: L.rand_like(a), "shape"),
    "randn_like": (lambda L, a, b, i, v: L.randn_like(b), "shape"),
    "eye(3)": (lambda L, a, b, i, v: L.eye(3), "exact"),
    "eye(2, 4)": (lambda L, a, b, i, v: L.eye(2, 4), "exact"),
    "linspace(0, 1, 5)": (lambda L, a, b, i, v: L.linspace(0, 1, 5), "exact"),
    "linspace(-1, 2, steps=7)": (lambda L, a, b, i, v: L.linspace(-1, 2, steps=7), "approx"),
    "arange(5)": (lambda L, a, b, i, v: L.arange(5), "exact"),
    "arange(1, 2, 0.25)": (lambda L, a, b, i, v: L.arange(1, 2, 0.25), "exact"),
    "tensor([[1., 2.]])": (lambda L, a, b, i, v: L.tensor([[1.0, 2.0]]), "exact"),
    "tensor([1, 2])": (lambda L, a, b, i, v: L.tensor([1, 2]), "exact"),
    "tensor(True)": (lambda L, a, b, i, v: L.tensor(True), "exact"),
    "tensor(x, dtype=float64)": (lambda L, a, b, i, v: L.tensor([1, 2], dtype=L.float64), "exact"),
    "new_zeros": (lambda L, a, b, i, v: i.new_zeros(2, 2), "exact"),
    "new_ones": (lambda L, a, b, i, v: a.new_ones((3,)), "exact"),
    "new_full": (lambda L, a, b, i, v: a.new_full((2,), 3.0), "exact"),
    # shapes
    "size()": (lambda L, a, b, i, v: tuple(b.size()), "exact"),
    "size(0)": (lambda L, a, b, i, v: b.size(0), "exact"),
    "size(-1)": (lambda L, a, b, i, v: b.size(-1), "exact"),
    "shape[0]": (lambda L, a, b, i, v: b.shape[0], "exact"),
    "dim()": (lambda L, a, b, i, v: b.dim(), "exact"),
    "ndim": (lambda L, a, b, i, v: b.ndim, "exact"),
    "numel()": (lambda L, a, b, i, v: b.numel(), "exact"),
    "len": (lambda L, a, b, i, v: len(b), "exact"),
    "view(-1)": (lambda L, a, b, i, v: b.view(-1), "exact"),
    "view(4, 6)": (lambda L, a, b, i, v: b.view(4, 6), "exact"),
    "reshape(2, -1)": (lambda L, a, b, i, v: b.reshape(2, -1), "exact"),
    "reshape((6, 4))": (lambda L, a, b, i, v: b.reshape((6, 4)), "exact"),
    "view_as": (lambda L, a, b, i, v: a.view_as(i.view(3, 2)), "exact"),
    "flatten()": (lambda L, a, b, i, v: b.flatten(), "exact"),
    "flatten(1)": (lambda L, a, b, i, v: b.flatten(1), "exact"),
    "flatten(0, 1)": (lambda L, a, b, i, v: b.flatten(0, 1), "exact"),
    "unflatten": (lambda L, a, b, i, v: b.unflatten(2, (2, 2)), "exact"),
    "transpose(0, 1)": (lambda L, a, b, i, v: b.transpose(0, 1), "exact"),
    "transpose(-1, -2)": (lambda L, a, b, i, v: b.transpose(-1, -2), "exact"),
    "t()": (lambda L, a, b, i, v: a.t(), "exact"),
    ".T": (lambda L, a, b, i, v: a.T, "exact"),
    ".mT": (lambda L, a, b, i, v: b.mT, "exact"),
    "permute(1, 0)": (lambda L, a, b, i, v: a.permute(1, 0), "exact"),
    "permute((2, 0, 1))": (lambda L, a, b, i, v: b.permute((2, 0, 1)), "exact"),
    "squeeze()": (lambda L, a, b, i, v: a.view(1, 2, 1, 3).squeeze(), "exact"),
    "squeeze(0)": (lambda L, a, b, i, v: a.view(1, 2, 1, 3).squeeze(0), "exact"),
    "squeeze(1) of size 2": (lambda L, a, b, i, v: a.view(1, 2, 1, 3).squeeze(1), "exact"),
    "unsqueeze(0)": (lambda L, a, b, i, v: a.unsqueeze(0), "exact"),
    "unsqueeze(-1)": (lambda L, a, b, i, v: a.unsqueeze(-1), "exact"),
    "expand(3, 2, 3)": (lambda L, a, b, i, v: a.expand(3, 2, 3), "exact"),
    "expand(-1, 4)": (lambda L, a, b, i, v: v.view(4, 1)[:2].expand(-1, 4), "exact"),
    "expand_as": (lambda L, a, b, i, v: v.view(1, 4).expand_as(b), "exact"),
    "broadcast_to": (lambda L, a, b, i, v: v.broadcast_to((3, 4)), "exact"),
    "tile": (lambda L, a, b, i, v: a.tile((2,)), "exact"),
    "movedim": (lambda L, a, b, i, v: b.movedim(0, -1), "exact"),
    "swapdims": (lambda L, a, b, i, v: b.swapdims(0, 2), "exact"),
    "hstack": (lambda L, a, b, i, v: L.hstack([a, a]), "exact"),
    "vstack": (lambda L, a, b, i, v: L.vstack([v, v]), "exact"),
    "as_tensor": (lambda L, a, b, i, v: L.as_tensor([1.0, 2.5]), "exact"),
    "repeat(2, 1)": (lambda L, a, b, i, v: a.repeat(2, 1), "exact"),
    "repeat(2, 1, 2)": (lambda L, a, b, i, v: a.repeat(2, 1, 2), "exact"),
    "flip(0)": (lambda L, a, b, i, v: a.flip(0), "exact"),
    "flip((0, 2))": (lambda L, a, b, i, v: b.flip((0, 2)), "exact"),
    "chunk(2, 1)": (lambda L, a, b, i, v: b.chunk(2, 1), "exact"),
    "chunk(3)": (lambda L, a, b, i, v: v.chunk(3), "exact"),
    "split(2)": (lambda L, a, b, i, v: v.split(3), "exact"),
    "split([1, 2], dim=1)": (lambda L, a, b, i, v: a.split([1, 2], dim=1), "exact"),
    "unbind(1)": (lambda L, a, b, i, v: a.unbind(1), "exact"),
    "narrow": (lambda L, a, b, i, v: b.narrow(2, 1, 2), "exact"),
    "select": (lambda L, a, b, i, v: b.select(1, -1), "exact"),
    "cat dim=0": (lambda L, a, b, i, v: L.cat([a, a]), "exact"),
    "cat dim=1": (lambda L, a, b, i, v: L.cat((a, a * 2), dim=1), "exact"),
    "cat int+float": (lambda L, a, b, i, v: L.cat([a, i], 0), "exact"),
    "stack": (lambda L, a, b, i, v: L.stack([a, a + 1]), "exact"),
    "stack dim=-1": (lambda L, a, b, i, v: L.stack([a, a], dim=-1), "exact"),
    "tril": (lambda L, a, b, i, v: b.tril(), "exact"),
    "triu(1)": (lambda L, a, b, i, v: b.triu(1), "exact"),
    "contiguous": (lambda L, a, b, i, v: a.t().contiguous(), "exact"),
    "clone": (lambda L, a, b, i, v: a.clone(), "exact"),
    # reductions
    "sum()": (lambda L, a, b, i, v: b.sum(), "exact"),
    "sum(1)": (lambda L, a, b, i, v: a.sum(1), "exact"),
    "sum(dim=(0, 2))": (lambda L, a, b, i, v: b.sum(dim=(0, 2)), "exact"),
    "sum(-1, keepdim=True)": (lambda L, a, b, i, v: b.sum(-1, keepdim=True), "exact"),
    "sum of int": (lambda L, a, b, i, v: i.int().sum(0), "exact"),
    "sum of bool": (lambda L, a, b, i, v: (a > 0).sum(), "exact"),
    "sum(dtype=float64)": (lambda L, a, b, i, v: a.sum(dtype=L.float64), "exact"),
    "mean()": (lambda L, a, b, i, v: b.mean(), "approx"),
    "mean(dim=1, keepdim=True)": (lambda L, a, b, i, v: a.mean(dim=1, keepdim=True), "approx"),
    "mean((0, 1))": (lambda L, a, b, i, v: b.mean((0, 1)), "approx"),
    "prod(1)": (lambda L, a, b, i, v: a.prod(1), "exact"),
    "prod of int": (lambda L, a, b, i, v: i.prod(), "exact"),
    "max()": (lambda L, a, b, i, v: a.max(), "exact"),
    "min()": (lambda L, a, b, i, v: i.min(), "exact"),
    "max(dim=1)": (lambda L, a, b, i, v: a.max(dim=1), "exact"),
    "max(1).values": (lambda L, a, b, i, v: a.max(1).values, "exact"),
    "max(0, keepdim=True).indices": (lambda L, a, b, i, v: a.max(0, keepdim=True).indices, "exact"),
    "min(dim=-1)": (lambda L, a, b, i, v: b.min(dim=-1), "exact"),
    "max ties: first index": (lambda L, a, b, i, v: L.tensor([[1.0, 3.0, 3.0]]).max(1), "exact"),
    "max(other)": (lambda L, a, b, i, v: a.max(-a), "exact"),
    "maximum": (lambda L, a, b, i, v: L.maximum(a, a.flip(0)), "exact"),
    "amax((0, 1))": (lambda L, a, b, i, v: b.amax((0, 1)), "exact"),
    "argmax()": (lambda L, a, b, i, v: a.argmax(), "exact"),
    "argmax(dim=1)": (lambda L, a, b, i, v: a.argmax(dim=1), "exact"),
    "argmin(0, keepdim=True)": (lambda L, a, b, i, v: a.argmin(0, keepdim=True), "exact"),
    "std()": (lambda L, a, b, i, v: b.std(), "approx"),
    "std(1)": (lambda L, a, b, i, v: a.std(1), "approx"),
    "std(unbiased=False)": (lambda L, a, b, i, v: a.std(unbiased=False), "approx"),
    "var(1, keepdim=True)": (lambda L, a, b, i, v: a.var(1, keepdim=True), "approx"),
    "var(correction=0)": (lambda L, a, b, i, v: b.var(dim=(1, 2), correction=0), "approx"),
    "var(False)": (lambda L, a, b, i, v: v.var(False), "approx"),
    "logsumexp(1)": (lambda L, a, b, i, v: a.logsumexp(1), "approx"),
    "logsumexp with -inf row": (lambda L, a, b, i, v: L.tensor([[-float("inf")] * 2, [0.0, 1.0]]).logsumexp(1),
                                "approx"),
    "softmax(dim=-1)": (lambda L, a, b, i, v: a.softmax(dim=-1), "approx"),
    "softmax(0)": (lambda L, a, b, i, v: a.softmax(0), "approx"),
    "log_softmax(1)": (lambda L, a, b, i, v: a.log_softmax(1), "approx"),
    "all()": (lambda L, a, b, i, v: (a > -10).all(), "exact"),
    "any(dim=1)": (lambda L, a, b, i, v: (a > 4).any(dim=1), "exact"),
    "all of float": (lambda L, a, b, i, v: a.all(), "exact"),
    "norm()": (lambda L, a, b, i, v: a.norm(), "approx"),
    "norm(p=1, dim=1)": (lambda L, a, b, i, v: a.norm(p=1, dim=1), "exact"),
    "norm(inf)": (lambda L, a, b, i, v: a.norm(float("inf")), "exact"),
    "sort()": (lambda L, a, b, i, v: a.sort(), "exact"),
    "sort(0, descending=True)": (lambda L, a, b, i, v: b.sort(0, descending=True), "exact"),
    "sort ints": (lambda L, a, b, i, v: i.sort(dim=1), "exact"),
    "argsort(descending=True)": (lambda L, a, b, i, v: v.argsort(descending=True), "exact"),
    "topk(2)": (lambda L, a, b, i, v: a.topk(2), "exact"),
    "topk(1, dim=0, largest=False)": (lambda L, a, b, i, v: a.topk(1, dim=0, largest=False), "exact"),
    "kthvalue(2, 1)": (lambda L, a, b, i, v: a.kthvalue(2, 1), "exact"),
    "median()": (lambda L, a, b, i, v: v.median(), "exact"),
    "median(dim=1)": (lambda L, a, b, i, v: a.median(dim=1), "exact"),
    "median with nan": (lambda L, a, b, i, v: L.tensor([[1.0, float("nan"), 0.0], [2.0, 1.0, 3.0]]).median(1),
                        "exact"),
    "std_mean(dim=1)": (lambda L, a, b, i, v: L.std_mean(a, dim=1), "approx"),
    "var_mean": (lambda L, a, b, i, v: L.var_mean(b, (0, 2), correction=0), "approx"),
    "trace": (lambda L, a, b, i, v: a[:, :2].trace(), "exact"),
    "diagonal(1)": (lambda L, a, b, i, v: a.diagonal(1), "exact"),
    "diag of a matrix": (lambda L, a, b, i, v: a.diag(), "exact"),
    "diag(v, 1)": (lambda L, a, b, i, v: v.diag(1), "exact"),
    "diag(v, -2)": (lambda L, a, b, i, v: v.diag(-2), "exact"),
    "unique": (lambda L, a, b, i, v: L.tensor([3, 1, 3, 2]).unique(return_inverse=True, return_counts=True),
               "exact"),
    "addmm": (lambda L, a, b, i, v: L.addmm(L.ones(2, 2), a, a.t()), "exact"),
    "cumsum(dim=1)": (lambda L, a, b, i, v: a.cumsum(dim=1), "exact"),
    "cumsum of int": (lambda L, a, b, i, v: i.int().cumsum(0), "exact"),
    "cumprod(0)": (lambda L, a, b, i, v: v.cumprod(0), "exact"),
    # indexing
    "x[0]": (lambda L, a, b, i, v: b[0], "exact"),
    "x[:, 1]": (lambda L, a, b, i, v: b[:, 1], "exact"),
    "x[..., None]": (lambda L, a, b, i, v: a[..., None], "exact"),
    "x[None]": (lambda L, a, b, i, v: a[None], "exact"),
    "x[-1]": (lambda L, a, b, i, v: b[-1, -2], "exact"),
    "x[1:3]": (lambda L, a, b, i, v: v[1:3], "exact"),
    "x[::2]": (lambda L, a, b, i, v: b[:, ::2, 1:], "exact"),
    "x[..., 0]": (lambda L, a, b, i, v: b[..., 0], "exact"),
    "x[[1, 0]]": (lambda L, a, b, i, v: a[[1, 0]], "exact"),
    "x[:, [2, 0]]": (lambda L, a, b, i, v: b[:, [2, 0]], "exact"),
    "x[..., idx]": (lambda L, a, b, i, v: b[..., L.tensor([3, 1])], "exact"),
    "x[bool mask list]": (lambda L, a, b, i, v: v[[True, False, True, True]], "exact"),
    "x[x > 0]": (lambda L, a, b, i, v: a[a > 0], "exact"),
    "x[0, [2, 0]]": (lambda L, a, b, i, v: b[0, [2, 0]], "exact"),
    "x[1, :, [3, 0]] (apart)": (lambda L, a, b, i, v: b[1, :, [3, 0]], "exact"),
    "x[:, 1, [3, 0]]": (lambda L, a, b, i, v: b[:, 1, [3, 0]], "exact"),
    "masked_select": (lambda L, a, b, i, v: a.masked_select(a > 1), "exact"),
    "nonzero()": (lambda L, a, b, i, v: (a > 1).nonzero(), "exact"),
    "nonzero(as_tuple=True)": (lambda L, a, b, i, v: (a > 1).nonzero(as_tuple=True), "exact"),
    "argwhere": (lambda L, a, b, i, v: i.argwhere(), "exact"),
    "count_nonzero(dim=0)": (lambda L, a, b, i, v: (a > 1).count_nonzero(dim=0), "exact"),
    "gather": (lambda L, a, b, i, v: a.gather(1, L.tensor([[2, 0], [1, 1]])), "exact"),
    "index_select": (lambda L, a, b, i, v: b.index_select(2, L.tensor([3, 0])), "exact"),
    "masked_fill": (lambda L, a, b, i, v: a.masked_fill(a < 0, 0.0), "exact"),
    "where(c, x, y)": (lambda L, a, b, i, v: L.where(a > 0, a, -a), "exact"),
    "where(c, x, 0.)": (lambda L, a, b, i, v: L.where(a > 0, a, 0.0), "exact"),
    "where(c, int, float)": (lambda L, a, b, i, v: L.where(a > 0, i, a), "exact"),
    # elementwise and conversions
    "clamp(min=0)": (lambda L, a, b, i, v: a.clamp(min=0), "exact"),
    "clamp(-1, 2)": (lambda L, a, b, i, v: a.clamp(-1, 2), "exact"),
    "clamp(max=1.5)": (lambda L, a, b, i, v: a.clamp(max=1.5), "exact"),
    "clamp int by float": (lambda L, a, b, i, v: i.clamp(0.5, 3.5), "exact"),
    "clip(0, 1)": (lambda L, a, b, i, v: a.clip(0, 1), "exact"),
    "clamp nan": (lambda L, a, b, i, v: L.tensor([float("nan"), 5.0]).clamp(0, 1), "exact"),
    "clamp min > max": (lambda L, a, b, i, v: a.clamp(min=2, max=1), "exact"),
    "to(float64)": (lambda L, a, b, i, v: a.to(L.float64), "exact"),
    "to('cpu')": (lambda L, a, b, i, v: a.to("cpu"), "exact"),
    "to(other)": (lambda L, a, b, i, v: a.to(i), "exact"),
    "float()": (lambda L, a, b, i, v: i.float(), "exact"),
    "double()": (lambda L, a, b, i, v: a.double(), "exact"),
    "int()": (lambda L, a, b, i, v: a.int(), "exact"),
    "long()": (lambda L, a, b, i, v: a.long(), "exact"),
    "half()": (lambda L, a, b, i, v: a.half(), "exact"),
    "bool()": (lambda L, a, b, i, v: a.bool(), "exact"),
    "type_as": (lambda L, a, b, i, v: i.type_as(a), "exact"),
    "abs()": (lambda L, a, b, i, v: a.abs(), "exact"),
    "neg()": (lambda L, a, b, i, v: a.neg(), "exact"),
    "exp()": (lambda L, a, b, i, v: a.exp(), "approx"),
    "log()": (lambda L, a, b, i, v: a.abs().log(), "approx"),
    "sqrt()": (lambda L, a, b, i, v: a.abs().sqrt(), "approx"),
    "pow(2)": (lambda L, a, b, i, v: a.pow(2), "exact"),
    "pow(0.5)": (lambda L, a, b, i, v: a.abs().pow(0.5), "approx"),
    "** 3": (lambda L, a, b, i, v: a ** 3, "approx"),
    "sigmoid()": (lambda L, a, b, i, v: a.sigmoid(), "approx"),
    "tanh()": (lambda L, a, b, i, v: a.tanh(), "approx"),
    "relu()": (lambda L, a, b, i, v: a.relu(), "exact"),
    "square()": (lambda L, a, b, i, v: a.square(), "exact"),
    "reciprocal()": (lambda L, a, b, i, v: a.reciprocal(), "approx"),
    "add(alpha=2)": (lambda L, a, b, i, v: a.add(a, alpha=2), "exact"),
    "sub": (lambda L, a, b, i, v: a.sub(1), "exact"),
    "mul": (lambda L, a, b, i, v: a.mul(a), "exact"),
    "div": (lambda L, a, b, i, v: a.div(4), "exact"),
    "int / int": (lambda L, a, b, i, v: i / 2, "exact"),
    "floor_divide": (lambda L, a, b, i, v: i // 2, "exact"),
    "eq": (lambda L, a, b, i, v: a.eq(a.flip(1)), "exact"),
    "ne": (lambda L, a, b, i, v: a.ne(1.0), "exact"),
    "gt lt ge le": (lambda L, a, b, i, v: (a.gt(0), a.lt(0), a.ge(1), a.le(1)), "exact"),
    "== scalar": (lambda L, a, b, i, v: a == 4.0, "exact"),
    "isnan isinf isfinite": (lambda L, a, b, i, v: (lambda t: (t.isnan(), t.isinf(), t.isfinite()))(
        L.tensor([1.0, float("nan"), -float("inf")])), "exact"),
    "logical_not": (lambda L, a, b, i, v: a.logical_not(), "exact"),
    "matmul": (lambda L, a, b, i, v: a.matmul(a.t()), "exact"),
    "mm": (lambda L, a, b, i, v: a.mm(L.tensor(M)), "exact"),
    "bmm": (lambda L, a, b, i, v: b.bmm(b.transpose(1, 2)), "exact"),
    "@": (lambda L, a, b, i, v: b @ v, "exact"),
    "dot": (lambda L, a, b, i, v: v.dot(v), "exact"),
    "outer": (lambda L, a, b, i, v: v.outer(v[:2]), "exact"),
    "isclose": (lambda L, a, b, i, v: a.isclose(a + 1e-7), "exact"),
    "roll(1, 0)": (lambda L, a, b, i, v: b.roll(1, 0), "exact"),
    "roll((1, -1), (1, 2))": (lambda L, a, b, i, v: b.roll((1, -1), (1, 2)), "exact"),
    "roll(2) flat": (lambda L, a, b, i, v: a.roll(2), "exact"),
    "L.sum(t, 1)": (lambda L, a, b, i, v: L.sum(a, 1), "exact"),
    "L.max(a, b)": (lambda L, a, b, i, v: L.max(a, -a), "exact"),
    "L.exp(t)": (lambda L, a, b, i, v: L.exp(a), "approx"),
    "L.softmax(t, dim=1)": (lambda L, a, b, i, v: L.softmax(a, dim=1), "approx"),
    "L.matmul": (lambda L, a, b, i, v: L.matmul(b, v), "exact"),
    "L.flatten(t, 1)": (lambda L, a, b, i, v: L.flatten(b, 1), "exact"),
    "L.transpose(t, 0, 1)": (lambda L, a, b, i, v: L.transpose(b, 0, 1), "exact"),
    "detach()": (lambda L, a, b, i, v: a.detach(), "exact"),
    ".data": (lambda L, a, b, i, v: a.data, "exact"),
}

# habits whose result is a Python value read from the tensor (realizes it)
READING = {
    "item()": lambda L, a, b, i, v: a.sum().item(),
    "tolist()": lambda L, a, b, i, v: i.tolist(),
    "float(t)": lambda L, a, b, i, v: float(a[0, 0]),
    "int(t)": lambda L, a, b, i, v: int(i[1, 2]),
    "bool(t)": lambda L, a, b, i, v: bool((a > 0).any()),
    "np.asarray(t)": lambda L, a, b, i, v: np.asarray(a).tolist(),
    "np.asarray(t, dtype=f64)": lambda L, a, b, i, v: (lambda r: (r.dtype.name, r.tolist()))(
        np.asarray(a, dtype=np.float64)),
    "np.array(t)": lambda L, a, b, i, v: np.array(i).tolist(),
    "t.numpy()": lambda L, a, b, i, v: a.numpy().tolist(),
    "is_tensor": lambda L, a, b, i, v: (L.is_tensor(a), L.is_tensor(A)),
    "hasattr unknown": lambda L, a, b, i, v: hasattr(a, "no_such_method"),
    "equal": lambda L, a, b, i, v: (a.equal(a), a.equal(a + 1)),
    "format": lambda L, a, b, i, v: f"{a.sum():.3f}",
    "iterate": lambda L, a, b, i, v: [r.tolist() for r in a],
    "allclose": lambda L, a, b, i, v: (a.allclose(a + 1e-7), L.allclose(a, a + 1)),
    "nelement ndimension": lambda L, a, b, i, v: (b.nelement(), b.ndimension()),
    "is_floating_point": lambda L, a, b, i, v: (a.is_floating_point(), i.is_floating_point()),
    "dtype == L.float32": lambda L, a, b, i, v: (a.dtype == L.float32, i.dtype == L.int64, a.dtype == L.float),
}

PRINTED = {
    "2-d f32": lambda L: L.tensor([[1.0, 2.0], [3.0, 4.0]]),
    "decimals": lambda L: L.tensor([1.5, -0.25, 3.125]),
    "sci": lambda L: L.tensor([1e-5, 1.0, 3e5]),
    "ints": lambda L: L.tensor([[1, -20], [300, 4]]),
    "int32": lambda L: L.tensor([1, 2], dtype=L.int32),
    "bool": lambda L: L.tensor([True, False]),
    "f64": lambda L: L.tensor([0.1, 0.2], dtype=L.float64),
    "scalar": lambda L: L.tensor(3.5),
    "nan inf": lambda L: L.tensor([float("nan"), float("inf"), 1.0]),
    "3-d": lambda L: L.tensor(B),
    "empty": lambda L: L.zeros(0, 3),
    "long row": lambda L: L.arange(30.0) / 7,
    "summarized": lambda L: L.arange(2000).reshape(40, 50),
    "requires_grad": lambda L: L.tensor([1.0, 2.0], requires_grad=True),
    "f16": lambda L: L.tensor([0.5, 1.25], dtype=L.float16),
}


def grad(L, data, f, **kw):
    w = L.tensor(data, requires_grad=True)
    f(L, w).backward(**kw)
    return w.grad


# name -> habit returning the gradient(s) (or a tensor computed under autograd)
AUTOGRAD = {
    "sum().backward()": lambda L: grad(L, A, lambda L, w: (w * w).sum()),
    "mean(1).sum()": lambda L: grad(L, A, lambda L, w: w.mean(1).sum()),
    "max(dim).values grad": lambda L: grad(L, [[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]],
                                           lambda L, w: w.max(dim=1).values.sum()),
    "clamp grad at the bounds": lambda L: grad(L, [-1.0, 0.0, 0.5, 1.0, 2.0], lambda L, w: w.clamp(0, 1).sum()),
    "std grad": lambda L: grad(L, A, lambda L, w: w.std(1).sum()),
    "logsumexp grad": lambda L: grad(L, A, lambda L, w: w.logsumexp(1).sum()),
    "indexing grad": lambda L: grad(L, B, lambda L, w: w[:, 1, ::2].sum() + w[..., [0, 3]].sum()),
    "masked_fill grad": lambda L: grad(L, A, lambda L, w: w.masked_fill(w < 0, 0.0).sum()),
    "transpose/expand grad": lambda L: grad(L, V, lambda L, w: w.view(4, 1).expand(4, 3).t().sum()),
    "cat/stack grad": lambda L: grad(L, V, lambda L, w: L.cat([w, w * 2]).sum() + L.stack([w, w]).sum()),
    "backward(gradient)": lambda L: grad(L, V, lambda L, w: w * 3, gradient=L.tensor([1.0, 0.0, 2.0, 1.0])),
    "two backward accumulate": lambda L: (lambda w: ((w * 2).sum().backward(), (w * w).sum().backward(), w.grad)[2])(
        L.tensor(V, requires_grad=True)),
    "grad.zero_()": lambda L: (lambda w: ((w * 2).sum().backward(), w.grad.zero_(), (w * 3).sum().backward(),
                                          w.grad)[3])(L.tensor(V, requires_grad=True)),
    "requires_grad_()": lambda L: (lambda w: ((w * w).sum().backward(), w.grad)[1])(L.tensor(V).requires_grad_()),
    "no_grad": lambda L: (lambda w: [_no_grad(L, w).requires_grad, w.requires_grad])(
        L.tensor(V, requires_grad=True)),
    "detach blocks": lambda L: grad(L, V, lambda L, w: (w.detach() * w).sum()),
    "is_leaf": lambda L: (lambda w: [w.is_leaf, (w * 2).is_leaf, w.grad is None])(L.tensor(V, requires_grad=True)),
    "fill_ and zero_ under no_grad": lambda L: _inplace_update(L),
    "manual SGD: w -= lr * w.grad": lambda L: _manual_sgd(L),
    "p.data -= ...; p.grad.data.zero_()": lambda L: _data_sgd(L),
    "grad_fn is None": lambda L: (lambda w: [w.grad_fn is None, (w * 2).grad_fn is not None,
                                             w.detach().grad_fn is None])(L.tensor(V, requires_grad=True)),
    "backward(retain_graph=True) twice": lambda L: (lambda w: (lambda y: (y.backward(retain_graph=True),
                                                                          y.backward(), w.grad)[2])(
        (w * w).sum()))(L.tensor(V, requires_grad=True)),
    "sort/topk grad": lambda L: grad(L, A, lambda L, w: (w.sort(1).values * L.tensor([1.0, 2.0, 3.0])).sum()
                                     + w.topk(2).values.sum() + w.median()),
    "abs_ relu_ of a computed tensor": lambda L: grad(L, A, lambda L, w: (lambda y: (y.abs_(), y.relu_(), y)[2])(
        w * 2 - 3).sum()),
    "detach_": lambda L: (lambda y: [y.detach_().requires_grad, y])(L.tensor(V, requires_grad=True) * 2),
    "x[mask] grad": lambda L: grad(L, A, lambda L, w: w[w > 0].sum() * 2),
    "masked_fill_ clamp_ of a computed tensor": lambda L: grad(L, A, lambda L, w: (lambda y: (
        y.masked_fill_(y > 4, 0.0), y.clamp_(min=-1.0), y)[2])(w * 2).sum()),
    "setitem": lambda L: (lambda t: (t.__setitem__((0, slice(1, None)), 9.0), t.__setitem__((..., 0), L.tensor(
        [7.0, 8.0])), t)[2])(L.tensor(A)),
    "data = (a new shape)": lambda L: (lambda w: (setattr(w, "data", L.tensor([5.0, 6.0, 7.0])), w)[1])(
        L.tensor([1.0, 2.0], requires_grad=True)),
    "manual_seed repeats": lambda L: (lambda r1, r2: bool((r1 == r2).all()))(
        (L.manual_seed(3), L.rand(5))[1], (L.manual_seed(3), L.rand(5))[1]),
}


def _no_grad(L, w):
    with L.no_grad():
        return w * 2


def _manual_sgd(L):
    w = L.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for _ in range(3):
        loss = ((w * L.tensor([0.5, 1.0, 2.0])) ** 2).sum()
        loss.backward()
        with L.no_grad():
            w -= 0.125 * w.grad
            w.grad.zero_()
    return [w, w.grad, w.requires_grad, w.is_leaf]


def _data_sgd(L):
    w = L.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for _ in range(2):
        (w * w).sum().backward()
        w.data -= 0.25 * w.grad.data
        w.grad.data.zero_()
    return [w, w.grad]


def _inplace_update(L):
    w = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * w).sum().backward()
    with L.no_grad():
        w.sub_(w.grad, alpha=0.5)
        w.grad.zero_()
    b = L.ones(3).fill_(2.5)
    return [w, w.grad, b.add_(1).mul_(2)]


# comparison -------------------------------------------------------------------------------------
def host(x):
    """A result as plain Python/numpy values (tensors: (dtype name, array))."""
    if isinstance(x, caten.Tensor):
        return ("torch." + _torch_dtype(x.dtype), np.array(x.numpy(), dtype=np.float64 if x.dtype in ("bf16",) else
                                                           None))
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return (str(x.dtype), x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy())
    if isinstance(x, (tuple, list)):
        return [host(e) for e in x]
    return x


def _torch_dtype(d):
    from caten.tensor.torchnames import DTYPES

    return {v: k for k, v in DTYPES.items()}[d]


def agree(got, want, how):
    g, w = host(got), host(want)
    if isinstance(w, list):
        assert isinstance(g, list) and len(g) == len(w), f"{len(g) if isinstance(g, list) else g} parts, want {len(w)}"
        for x, y in zip(g, w):
            _agree(x, y, how)
        return
    _agree(g, w, how)


def _agree(g, w, how):
    if isinstance(w, list):
        assert isinstance(g, list) and len(g) == len(w), (g, w)
        for x, y in zip(g, w):
            _agree(x, y, how)
        return
    if isinstance(w, tuple) and len(w) == 2 and isinstance(w[1], np.ndarray):
        assert g[0] == w[0], f"dtype {g[0]}, torch's {w[0]}"
        assert g[1].shape == w[1].shape, f"shape {g[1].shape}, torch's {w[1].shape}"
        if how == "exact":
            np.testing.assert_array_equal(g[1], w[1])
        elif how == "approx":
            np.testing.assert_allclose(g[1], w[1], rtol=2e-6, atol=1e-7, equal_nan=True)
        return
    assert g == w, f"{g!r}, torch's {w!r}"


def run_group(habits, runtime="numpy", batch=True):
    """Every habit with both libraries; the caten results of a group realized by one program."""
    caten.tensor.set_default_runtime(runtime)
    failures = []
    results = {}
    ins_c, ins_t = inputs(caten), inputs(torch)
    for name, (f, how) in habits.items():
        try:
            results[name] = (f(caten, *ins_c), f(torch, *ins_t), how)
        except Exception as e:  # a habit that fails is a finding to report, not a crash of the probe
            failures.append(f"{name}: {type(e).__name__}: {e}")
    if batch:
        nodes = [t.node for got, _, _ in results.values() for t in _tensors(got)]
        realize(nodes, runtime)
    for name, (got, want, how) in results.items():
        try:
            if how == "shape":
                assert tuple(got.shape) == tuple(want.shape) and host(got)[0] == host(want)[0], (got.shape, want.shape)
            else:
                agree(got, want, how)
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
    return failures


def _tensors(x):
    if isinstance(x, caten.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for e in x for t in _tensors(e)]
    return []


@pytest.fixture(autouse=True)
def _runtime():
    yield
    caten.tensor.set_default_runtime("llvm")


def test_forward_habits_match_torch():
    failures = run_group(FORWARD)
    assert not failures, "\n".join(failures)


def test_some_habits_on_llvm():
    picked = ["sum(1)", "max(dim=1)", "std(1)", "logsumexp(1)", "clamp(-1, 2)", "x[:, [2, 0]]", "cat dim=1",
              "expand(3, 2, 3)", "var(False)", "where(c, int, float)"]
    failures = run_group({n: FORWARD[n] for n in picked}, runtime="llvm")
    assert not failures, "\n".join(failures)


def test_reading_habits_match_torch():
    caten.tensor.set_default_runtime("numpy")
    failures = []
    for name, f in READING.items():
        try:
            assert_same = f(caten, *inputs(caten)), f(torch, *inputs(torch))
            assert assert_same[0] == assert_same[1], assert_same
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def test_print_shows_values_as_torch():
    caten.tensor.set_default_runtime("numpy")
    failures = []
    for name, f in PRINTED.items():
        got, want = str(f(caten)), str(f(torch)).replace("torch.", "caten.")
        if got != want or repr(f(caten)) != want:
            failures.append(f"{name}:\n{got}\n-- torch:\n{want}")
    assert not failures, "\n".join(failures)


def test_autograd_habits_match_torch():
    caten.tensor.set_default_runtime("numpy")
    failures = []
    for name, f in AUTOGRAD.items():
        try:
            agree(f(caten), f(torch), "approx")
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def test_probe_size():
    assert len(FORWARD) + len(READING) + len(PRINTED) + len(AUTOGRAD) >= 110


# diagnostics ------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,match", [
    (lambda t: t.sum(1, True, None, 4), r"sum\(\): .*t\.sum\(dim=None, keepdim=False.*did you mean t\.sum\(dim=1\)"),
    (lambda t: t.mean(dims=1), r"unknown keyword 'dims' \(did you mean dim=\?\)"),
    (lambda t: t.transpose(0), r"transpose\(\).*t\.transpose\(dim0, dim1\)"),
    (lambda t: t.clamp(), r"clamp\(\) needs min= or max="),
    (lambda t: t.max(dim=(0, 1)), r"takes one dim"),
    (lambda t: t.sum(dim=5), r"dim 5 is out of range"),
    (lambda t: t.view(2, "a"), r"sizes are ints"),
    (lambda t: caten.cat(t), r"cat takes a non-empty list"),
    (lambda t: t.long().mean(), r"mean\(\) needs a floating-point tensor"),
    (lambda t: t.var(unbiased=True, correction=0), r"not both"),
    (lambda t: caten.where(t > 0), r"where\(condition\) alone"),
    (lambda t: t.retain_grad(), r"only leaf tensors"),
    (lambda t: t.t().t().view(2, 3, 1).t(), r"rank <= 2"),
    (lambda t: t.flor(), r"no attribute 'flor'; did you mean floor|no attribute 'flor'"),
])
def test_bad_calls_name_the_working_call(call, match):
    t = caten.tensor(A)
    with pytest.raises(caten.Error, match=match):
        call(t)


def test_bad_calls_are_type_errors_too():
    with pytest.raises(TypeError):
        caten.tensor(A).sum(foo=1)


def test_inplace_on_a_leaf_that_requires_grad_needs_no_grad():
    w = caten.tensor([1.0], requires_grad=True)
    with pytest.raises(caten.Error, match="changed in place"):
        w.zero_()


def test_library_keywords_still_work():
    """The library's spellings (axis=, keepdims=) stay accepted beside torch's."""
    caten.tensor.set_default_runtime("numpy")
    t = caten.tensor(A)
    np.testing.assert_array_equal(t.sum(axis=1, keepdims=True).numpy(), A.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(caten.Tensor.zeros([2, 3], "i32").numpy(), np.zeros((2, 3), np.int32))
    np.testing.assert_array_equal(caten.Tensor.concat(t, t, axis=1).numpy(), np.concatenate([A, A], 1))


# the docs table ---------------------------------------------------------------------------------
def test_docs_table_is_generated_from_the_registry():
    page = (ROOT / "docs" / "tensor.md").read_text(encoding="utf-8")
    want = table()
    assert page == torchnames.page(page), ("docs/tensor.md's torch table is stale: regenerate it with python -c "
                                           "\"from caten.tensor.torchnames import rewrite; rewrite('docs/tensor.md')\"")
    rows = re.findall(r"^\| `(?:torch|Tensor)\.(\w+)`", want, re.M)
    assert sorted(rows) == sorted(REGISTRY)
