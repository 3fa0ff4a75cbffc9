"""torch.optim over caten Tensors (LANGUAGE.md section 12): `optimizer` (the base: param groups,
state, one program a step), `algorithms` (SGD, Adam, AdamW, RMSprop, Adagrad), `lr_scheduler`.
`caten.optim` is this package's public face."""

from caten.tensor.optim import lr_scheduler
from caten.tensor.optim.algorithms import SGD, Adagrad, Adam, AdamW, RMSprop
from caten.tensor.optim.optimizer import Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
