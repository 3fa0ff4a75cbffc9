"""torch.nn's containers: `Module` (parameters, buffers and sub-modules found from attributes),
`Sequential`, `ModuleList`, `ModuleDict`, and `Parameter`.

A parameter is a `Parameter` attribute, or any leaf Tensor attribute that requires gradients
(caten's own habit, `Tensor(..., requires_grad=True)`); every other Tensor attribute is a buffer.
So a frozen parameter (`requires_grad_(False)`) stays a parameter, as torch's does. Names and
order follow torch: a module's own tensors in attribute order, then its sub-modules', dotted.
`Module.__init__` needs no call: a subclass that skips `super().__init__()` still works.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor


class Parameter(Tensor):
    """torch.nn.Parameter: a Tensor a Module counts as a parameter even when frozen."""

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True):
        super().__init__(np.zeros(0, np.float32) if data is None else data, requires_grad=requires_grad)


class IncompatibleKeys(NamedTuple):
    """What `load_state_dict(strict=False)` left out, as torch's `_IncompatibleKeys`."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _is_param(v: Tensor) -> bool:
    return isinstance(v, Parameter) or (v.requires_grad and v.is_leaf)


class Module:
    """A layer: parameters and sub-modules as attributes, `forward` called by `__call__`."""

    training = True

    def __init__(self) -> None:
        """Nothing to set up (torch's `super().__init__()` is accepted, not needed)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise Error(f"{type(self).__name__} has no forward", hint="define forward(self, x) in the subclass")

    # discovery ---------------------------------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, Any]]:
        """(name, Tensor or Module) in attribute order; lists and tuples name their items
        `attr.i` (torch's ModuleList); names starting with `_` are private, not state."""
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            if isinstance(v, (Tensor, Module)):
                yield k, v
            elif isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    if isinstance(x, (Tensor, Module)):
                        yield f"{k}.{i}", x

    def _named(self, prefix: str, seen: set[int]) -> Iterator[tuple[str, Tensor]]:
        """Every Tensor once (a shared one under its first name): own ones, then sub-modules'."""
        kids = list(self._children())
        for k, v in kids:
            if isinstance(v, Tensor) and id(v) not in seen:
                seen.add(id(v))
                yield prefix + k, v
        for k, v in kids:
            if isinstance(v, Module) and id(v) not in seen:
                seen.add(id(v))
                yield from v._named(prefix + k + ".", seen)

    def named_tensors(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """Parameters and buffers: everything the state_dict holds."""
        return self._named(prefix, set())

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """The parameters, frozen ones included (torch's); an optimizer skips those without a grad."""
        it = self.named_tensors(prefix) if recurse else ((prefix + k, v) for k, v in self._children()
                                                           if isinstance(v, Tensor))
        return ((k, v) for k, v in it if _is_param(v))

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """An iterator, as torch's (`next(model.parameters())`; `list(...)` to count)."""
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        return ((k, v) for k, v in self.named_tensors(prefix) if not _is_param(v))

    def buffers(self) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for k, v in self._children():
            if isinstance(v, Module) and id(v) not in seen:
                seen.add(id(v))
                yield k, v

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_modules(self, prefix: str = "", memo: set[int] | None = None) -> Iterator[tuple[str, Module]]:
        """This module, then every sub-module once, depth first (torch's order)."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for k, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{k}" if prefix else k, memo)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def register_buffer(self, name: str, tensor: Tensor | None) -> None:
        """torch's spelling of a buffer attribute: state, not a parameter."""
        if tensor is not None and (not isinstance(tensor, Tensor) or isinstance(tensor, Parameter)):
            raise Error(f"register_buffer: `{name}` must be a Tensor that is not a Parameter")
        setattr(self, name, tensor)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        setattr(self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        mods = dict(self.named_modules())
        if target not in mods:
            raise Error(f"{type(self).__name__} has no sub-module {target!r}", hint=f"it has {sorted(mods)}")
        return mods[target]

    # modes and gradients ---------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set `.training` on this module and every sub-module (Dropout, BatchNorm read it)."""
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = Tensor(np.zeros(p.shape, np_dtype(p.dtype)), runtime=p.runtime)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; frozen ones stay parameters and state."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """fn on every sub-module, then on this one (torch's order: `model.apply(init_weights)`)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # state ---------------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """Every tensor's value (parameters, frozen or not, and buffers) by dotted name, copied:
        torch's names and layouts for torch's layers."""
        return OrderedDict((k, np.array(p.numpy())) for k, p in self.named_tensors())

    def save(self, path: str) -> None:
        np.savez(path, **self.state_dict())

    def load_state_dict(self, sd: Any, strict: bool = True) -> IncompatibleKeys:
        """Load values from a dict of arrays (or torch tensors) or an `.npz` path. Every key and
        shape is checked before any tensor changes, so a failed load leaves the module as is;
        `strict=False` loads the keys both sides have and reports the rest."""
        if isinstance(sd, (str, bytes)) or hasattr(sd, "__fspath__"):
            sd = _read_npz(sd)
        params = dict(self.named_tensors())
        missing = sorted(set(params) - set(sd))
        extra = sorted(set(sd) - set(params))
        if strict and (missing or extra):
            raise Error(f"load_state_dict: missing {missing}, unexpected {extra}",
                        hint=f"the module's keys are {sorted(params)}")
        new = {}
        for k, p in params.items():
            if k not in sd:
                continue
            v = sd[k]
            v = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            if tuple(v.shape) != p.shape:
                raise Error(f"load_state_dict: `{k}` has shape {list(v.shape)}, the module's {list(p.shape)}")
            new[k] = np.array(v, dtype=np_dtype(p.dtype), order="C", copy=True)
        for k, v in new.items():
            params[k].set_value(v)
        return IncompatibleKeys(missing, extra)

    def to(self, runtime: str) -> Module:
        """Run this module's tensors on `runtime` (values stay where they are: host arrays);
        torch's "cpu" keeps the runtime they have."""
        if runtime != "cpu":
            for _, t in self.named_tensors():
                t.runtime = runtime
        return self

    def cpu(self) -> Module:
        return self

    def _cast(self, dtype: str) -> Module:
        """Every floating-point parameter and buffer as a new tensor of `dtype` (torch's
        `float()`, `double()`, `half()`): cast a model before giving its parameters to an optimizer."""
        def cast(v: Any) -> Any:
            if not isinstance(v, Tensor) or v.dtype not in ("f16", "bf16", "f32", "f64") or v.dtype == dtype:
                return v
            arr = np.array(v.numpy(), dtype=np_dtype(dtype))
            new = type(v)(arr, requires_grad=v.requires_grad) if isinstance(v, Parameter) else Tensor(arr)
            new.runtime = v.runtime
            return new

        for m in self.modules():
            for k, v in list(vars(m).items()):
                setattr(m, k, type(v)(cast(x) for x in v) if isinstance(v, (list, tuple)) else cast(v))
        return self

    def float(self) -> Module:
        return self._cast("f32")

    def double(self) -> Module:
        return self._cast("f64")

    def half(self) -> Module:
        return self._cast("f16")

    # printing ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        """torch's layout: `Name(extra)` or the children one a line, indented."""
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        kids = [f"({k}): " + repr(m).replace("\n", "\n  ") for k, m in self.named_children()]
        body = ""
        if len(lines) == 1 and not kids:
            body = lines[0]
        elif lines or kids:
            body = "\n  " + "\n  ".join(lines + kids) + "\n"
        return f"{type(self).__name__}({body})"


def _read_npz(path: Any) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("it holds one array, not a state dict")
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as e:
        raise Error(f"load_state_dict: cannot read {str(path)!r}: {e}",
                    hint="give a file written by Module.save (an .npz of arrays by name)") from None


class Sequential(Module):
    """Layers (modules or functions of one Tensor) applied in order; indexable. Built from
    layers, or from one OrderedDict of named modules (torch's two forms)."""

    def __init__(self, *layers: Any):
        if len(layers) == 1 and isinstance(layers[0], OrderedDict):
            self._names, self.layers = list(layers[0]), list(layers[0].values())
        else:
            self._names, self.layers = [str(i) for i in range(len(layers))], list(layers)

    def __getitem__(self, i: int | slice) -> Any:
        return Sequential(*self.layers[i]) if isinstance(i, slice) else self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.layers)

    def append(self, layer: Any) -> Sequential:
        return self.add_module(str(len(self.layers)), layer)

    def add_module(self, name: str, module: Any) -> Sequential:
        """A layer appended under `name` (torch's Sequential.add_module)."""
        if name in self._names:
            raise Error(f"Sequential already has a layer named {name!r}")
        self._names.append(name)
        self.layers.append(module)
        return self

    def __getattr__(self, name: str) -> Any:
        """A named layer of the OrderedDict form (`seq.fc`)."""
        d = self.__dict__
        if "_names" in d and name in d["_names"]:
            return d["layers"][d["_names"].index(name)]
        raise AttributeError(f"'Sequential' object has no attribute {name!r}")

    def _children(self) -> Iterator[tuple[str, Any]]:
        """Layers by position (torch's `0.weight`) or by their OrderedDict name."""
        for k, x in zip(self._names, self.layers):
            if isinstance(x, (Tensor, Module)):
                yield k, x

    def forward(self, x: Tensor) -> Tensor:
        for f in self.layers:
            x = f(x)
        return x


class ModuleList(Module):
    """torch.nn.ModuleList: a list of modules whose parameters the owner sees (`name.i.weight`)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        self._items: list[Module] = []
        self.extend(modules or [])

    def _children(self) -> Iterator[tuple[str, Any]]:
        return ((str(i), m) for i, m in enumerate(self._items))

    def __getitem__(self, i: int | slice) -> Any:
        return ModuleList(self._items[i]) if isinstance(i, slice) else self._items[i]

    def __setitem__(self, i: int, m: Module) -> None:
        self._items[i] = _module(m)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)

    def append(self, m: Module) -> ModuleList:
        self._items.append(_module(m))
        return self

    def extend(self, ms: Iterable[Module]) -> ModuleList:
        for m in ms:
            self.append(m)
        return self

    def insert(self, i: int, m: Module) -> None:
        self._items.insert(i, _module(m))

    def __repr__(self) -> str:
        """torch's: a run of equal consecutive items is one line, `(0-2): 3 x Linear(...)`."""
        runs: list[list[Any]] = []
        for i, m in enumerate(self._items):
            r = repr(m)
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [(f"({a}): " if a == b else f"({a}-{b}): {b - a + 1} x ") + r.replace("\n", "\n  ")
                 for a, b, r in runs]
        return "ModuleList(" + ("\n  " + "\n  ".join(lines) + "\n" if lines else "") + ")"


class ModuleDict(Module):
    """torch.nn.ModuleDict: modules by name, in insertion order (`name.key.weight`)."""

    def __init__(self, modules: Any = None):
        self._items: dict[str, Module] = {}
        self.update(modules or {})

    def _children(self) -> Iterator[tuple[str, Any]]:
        return iter(self._items.items())

    def __getitem__(self, k: str) -> Module:
        if k not in self._items:
            raise KeyError(k)
        return self._items[k]

    def __setitem__(self, k: str, m: Module) -> None:
        self._items[str(k)] = _module(m)

    def __delitem__(self, k: str) -> None:
        del self._items[k]

    def __contains__(self, k: object) -> bool:
        return k in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> Any:
        return self._items.keys()

    def values(self) -> Any:
        return self._items.values()

    def items(self) -> Any:
        return self._items.items()

    def update(self, modules: Any) -> None:
        pairs = modules.items() if hasattr(modules, "items") else modules
        for k, m in pairs:
            self[k] = m

    def pop(self, k: str) -> Module:
        return self._items.pop(k)


def _module(m: Any) -> Module:
    if not isinstance(m, Module):
        raise Error(f"a module container holds Modules, got {type(m).__name__}")
    return m
