"""torch.nn over caten Tensors (LANGUAGE.md section 12), one module a job: `module` (Module and
containers), `layers`, `norms`, `recurrent`, `attention`, `transformer`, `activations`, `loss`,
`functional` (torch's F), `init` (torch's nn.init), `utils` (gradient clipping). `caten.nn` is this
package's public face."""

from caten.tensor.nn import conv_layers, functional, init, resample_layers, utils
from caten.tensor.nn.activations import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    Identity,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
)
from caten.tensor.nn.attention import MultiheadAttention
from caten.tensor.nn.conv_layers import *  # noqa: F401, F403 (each module's __all__)
from caten.tensor.nn.layers import (
    AdaptiveAvgPool2d,
    AvgPool2d,
    Conv1d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Linear,
    MaxPool2d,
    Unflatten,
)
from caten.tensor.nn.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from caten.tensor.nn.module import Module, ModuleDict, ModuleList, Parameter, Sequential
from caten.tensor.nn.norms import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from caten.tensor.nn.recurrent import GRU, LSTM, RNN
from caten.tensor.nn.resample_layers import *  # noqa: F401, F403
from caten.tensor.nn.transformer import TransformerEncoder, TransformerEncoderLayer

__all__ = ["functional", "init", "utils", "Module", "Sequential", "ModuleList", "ModuleDict", "Parameter",
           "Linear", "Conv1d", "Conv2d", "Embedding", "Flatten", "Unflatten", "Dropout", "MaxPool2d", "AvgPool2d",
           "AdaptiveAvgPool2d", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
           "RNN", "LSTM", "GRU", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerEncoder",
           "Identity", "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Hardtanh", "Softmax",
           "LogSoftmax", "ELU", "Softplus", "Hardswish", "Hardsigmoid", "Mish",
           "SELU", "CELU", "LogSigmoid", "Softsign", "Tanhshrink", "Hardshrink", "Softshrink", "PReLU", "GLU",
           "Softmin",
           "MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "NLLLoss",
           "CrossEntropyLoss"]
__all__ += conv_layers.__all__ + resample_layers.__all__
