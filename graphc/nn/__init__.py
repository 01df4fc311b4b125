"""Neural-network layers, losses and utilities (``graphc.nn``), mirroring ``torch.nn``."""

from . import activation as _activation
from . import attention, functional, init, utils
from ._fembed import EmbeddingBag
from ._frrelu import RReLU
from .activation import GELU, Hardswish, ReLU, SiLU
from .adaptive import AdaptiveLogSoftmaxWithLoss
from .compat import CrossMapLRN2d, DataParallel, SyncBatchNorm
from .containers import ModuleDict, ParameterDict, ParameterList
from .extra import (
    AdaptiveMaxPool1d,
    ChannelShuffle,
    Fold,
    LocalResponseNorm,
    LPPool1d,
    LPPool2d,
    MultiLabelMarginLoss,
    MultiMarginLoss,
    PairwiseDistance,
    Softmax2d,
    TripletMarginWithDistanceLoss,
    Unfold,
)
from .layers import Flatten, Identity, Linear, ModuleList, Sequential, Sigmoid, Tanh
from .layers2d import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AlphaDropout,
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    Embedding,
    FeatureAlphaDropout,
    LayerNorm,
    MaxPool1d,
    MaxPool2d,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from .layers3d import (
    AdaptiveAvgPool3d,
    AdaptiveMaxPool3d,
    AvgPool3d,
    BatchNorm3d,
    Conv3d,
    ConvTranspose3d,
    InstanceNorm3d,
    MaxPool3d,
)
from .lazy import (
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
    LazyInstanceNorm1d,
    LazyInstanceNorm2d,
    LazyInstanceNorm3d,
    LazyLinear,
)
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelSoftMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
)
from .module import Module, Parameter
from .padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad3d,
    LPPool3d,
    ReflectionPad3d,
    ReplicationPad3d,
    ZeroPad3d,
)
from .parameter import Buffer, UninitializedBuffer, UninitializedParameter
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .simple import (
    ConstantPad1d,
    ConstantPad2d,
    CosineSimilarity,
    PixelShuffle,
    PixelUnshuffle,
    PReLU,
    ReflectionPad1d,
    ReflectionPad2d,
    ReplicationPad1d,
    ReplicationPad2d,
    ZeroPad1d,
    ZeroPad2d,
)
from .transformer import (
    Bilinear,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    MultiheadAttention,
    RMSNorm,
    TransformerEncoder,
    TransformerEncoderLayer,
    Unflatten,
)
from .transformer_decoder import Transformer, TransformerDecoder, TransformerDecoderLayer
from .unpool import (
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
)

__all__ = [
    "Module", "Parameter", "Linear", "ReLU", "Tanh", "Sigmoid", "Flatten", "Identity",
    "Sequential", "ModuleList", "L1Loss", "MSELoss", "functional", "init", "utils", "attention",
    "Conv2d", "MaxPool2d", "AvgPool2d", "Dropout", "LayerNorm", "BatchNorm1d", "BatchNorm2d",
    "Embedding", "GELU", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "SmoothL1Loss",
    "SiLU", "Hardswish", "ModuleDict", "ParameterList", "ParameterDict",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "GroupNorm",
    "InstanceNorm1d", "InstanceNorm2d", "RMSNorm", "Bilinear", "Unflatten",
    "Conv1d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "AvgPool1d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample",
    "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "BCELoss", "KLDivLoss", "HuberLoss", "CosineEmbeddingLoss", "MarginRankingLoss",
    "HingeEmbeddingLoss", "TripletMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss",
    "SoftMarginLoss", "MultiLabelSoftMarginLoss", "CTCLoss",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
    "PixelShuffle", "PixelUnshuffle", "ConstantPad1d", "ConstantPad2d", "ZeroPad1d",
    "ZeroPad2d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d",
    "PReLU", "CosineSimilarity", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
    "FeatureAlphaDropout",
    "Softmax2d", "ChannelShuffle", "LocalResponseNorm", "Fold", "Unfold", "AdaptiveMaxPool1d",
    "LPPool1d", "LPPool2d", "PairwiseDistance", "MultiMarginLoss", "MultiLabelMarginLoss",
    "TripletMarginWithDistanceLoss",
    "RReLU",
    "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "EmbeddingBag",
    "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool3d", "BatchNorm3d", "InstanceNorm3d",
    "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "ConstantPad3d", "ZeroPad3d", "ReflectionPad3d", "ReplicationPad3d", "CircularPad1d",
    "CircularPad2d", "CircularPad3d", "LPPool3d", "Buffer", "UninitializedParameter",
    "UninitializedBuffer", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
    "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d",
    "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "CrossMapLRN2d", "DataParallel", "SyncBatchNorm",
    "AdaptiveLogSoftmaxWithLoss",
]

# every activation module the op table defines (added table entries need no edit here)
globals().update(_activation.MODULES)
__all__ += sorted(set(_activation.MODULES) - set(__all__))
