"""Models by name: the PyTorch DDP tutorial's ToyModel, an MLP, a small CNN, a CIFAR-sized ResNet-18, any
torchvision classification model, and any timm model as ``timm:NAME`` (the optional extra ``timm``).

A timm model is made with random weights (``pretrained=False``: nothing is downloaded) for the data's channels and
classes (``in_chans``, ``num_classes``), and for its image size where its architecture fixes one (a ViT's
``img_size``; a convolutional network takes any size).

Example:
    >>> import torch
    >>> from ignite_ddl.trainer.models import build_model
    >>> build_model("cnn", in_channels=3, image_size=32, num_classes=10)(torch.zeros(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ignite_ddl.core.environment import torchvision  # checked there: one built for another torch is refused
from ignite_ddl.core.errors import ConfigError

__all__ = [
    "OWN_MODELS",
    "ToyModel",
    "build_model",
    "check_model",
    "mlp",
    "small_cnn",
]

tv_models = torchvision.models

OWN_MODELS = ("toy", "mlp", "wide_mlp", "cnn", "resnet18")
TIMM = "timm:"  # --model timm:NAME
WIDE = (2048, 2048, 2048)  # wide_mlp: 14.7 M parameters on 3x32x32 inputs, nearly all of its memory in weights


class ToyModel(nn.Module):
    """The PyTorch DDP tutorial's model: Linear(in, 10) -> ReLU -> Linear(10, out); inputs are flattened."""

    def __init__(self, in_features: int = 10, out_features: int = 5):
        super().__init__()
        self.net1 = nn.Linear(in_features, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x.flatten(1))))


def mlp(in_features: int, num_classes: int, hidden: Sequence[int] = (256, 128)) -> nn.Sequential:
    """Linear layers ``hidden`` wide with a ReLU after each, then a linear head, on flattened inputs.

    ``--model mlp`` is the default ``(256, 128)``; the labs vary width and depth through ``hidden``.
    """
    sizes = [in_features, *hidden, num_classes]
    layers: list[nn.Module] = [nn.Flatten()]
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])  # no ReLU after the head


def small_cnn(in_channels: int, num_classes: int) -> nn.Module:
    """Two conv blocks and a linear head; no BatchNorm, so N-way DDP reproduces large-batch SGD exactly."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64 * 16, num_classes),
    )


def _resnet18_small(in_channels: int, num_classes: int) -> nn.Module:
    """ResNet-18 for 32x32 inputs: a 3x3 stride-1 stem and no max-pool, as is usual for CIFAR10."""
    model = tv_models.resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


class _RepeatChannels(nn.Module):
    """Feeds grey images to models built for RGB by repeating the single channel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(-1, 3, -1, -1)


def _torchvision_models() -> list[str]:
    return sorted(tv_models.list_models(module=tv_models))


def check_model(name: str) -> None:
    if name.startswith(TIMM):
        _check_timm(name)
    elif name not in OWN_MODELS and name not in _torchvision_models():
        raise ConfigError(
            f"unknown model '{name}' (choose from: {', '.join(OWN_MODELS)}, a torchvision classification model "
            "such as resnet50, or timm:NAME)"
        )


def _check_timm(name: str) -> None:
    try:
        import timm
    except ImportError:
        raise ConfigError(f"--model {name} needs timm: pip install 'ignite-ddl[timm]'") from None
    model = name.removeprefix(TIMM)
    if not timm.is_model(model):
        close = difflib.get_close_matches(model, timm.list_models(), n=3)
        hint = f"close: {', '.join(close)}; " if close else ""
        raise ConfigError(
            f"unknown timm model '{model}' ({hint}list them with: python -c \"import timm; "
            "print(timm.list_models('*vit*'))\")"
        )


def _timm_model(name: str, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    import timm

    model = name.removeprefix(TIMM)
    default = timm.models.get_pretrained_cfg(model)
    size: dict[str, Any] = {"img_size": image_size} if default is not None and default.fixed_input_size else {}
    built: nn.Module = timm.create_model(model, pretrained=False, num_classes=num_classes, in_chans=in_channels, **size)
    return built


def build_model(name: str, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """Instantiate ``name`` for inputs of shape (in_channels, image_size, image_size)."""
    check_model(name)
    if name == "toy":
        return ToyModel(in_channels * image_size * image_size, num_classes)
    if name == "mlp":
        return mlp(in_channels * image_size * image_size, num_classes)
    if name == "wide_mlp":
        return mlp(in_channels * image_size * image_size, num_classes, hidden=WIDE)
    if name == "cnn":
        return small_cnn(in_channels, num_classes)
    if name == "resnet18":
        return _resnet18_small(in_channels, num_classes)
    if name.startswith(TIMM):
        return _timm_model(name, in_channels, image_size, num_classes)
    model = tv_models.get_model(name, weights=None, num_classes=num_classes)
    if in_channels == 1:
        return nn.Sequential(_RepeatChannels(), model)
    return model
