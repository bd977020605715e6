"""Moving trainer state between a device and host memory, and host copies of weights.

A trainer's cluster is lent out between stages: `offload` moves parameters and optimizer state
to host memory so the GPUs can be granted to someone else; `onload` brings them back. On a CPU
machine both are no-ops in effect (the device is the host).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: str | torch.device) -> None:
    """Move every tensor of the optimizer's state (Adam moments...) to `device`."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device)


def move_trainer(
    module: nn.Module, optimizers: list[torch.optim.Optimizer], device: str | torch.device
) -> None:
    """Move a module and its optimizers' state to `device`; frees GPU cache when leaving it."""
    module.to(device)
    for optimizer in optimizers:
        move_optimizer_state(optimizer, device)
    if str(device) == "cpu" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def host_copy(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU clones: a snapshot that later optimizer steps cannot change."""
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state_dict.items()}
