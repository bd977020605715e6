"""The model shapes scenarios may name (`model: 7b`), for the simulator's cost model.

A shape is what the cost of training and generation depends on: parameter count, layers,
hidden size and the KV-cache geometry. The numbers are the published configs of the Qwen2.5
family (huggingface.co/Qwen/Qwen2.5-*/config.json) and of Llama-3-70B; a "size class" stands
for every model of about that shape. KV bytes per token = 2 (K and V) x layers x KV heads x
head dim x 2 bytes (BF16); for Qwen2.5-7B that is 56 KiB, as WORKLOADS.md lists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    num_params: float
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int

    @property
    def kv_bytes_per_token(self) -> int:
        """BF16 K and V of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * 2

    @property
    def weight_bytes(self) -> float:
        """BF16 weights."""
        return 2.0 * self.num_params


#: Size classes by the name a scenario uses.
MODELS: dict[str, ModelShape] = {
    # Qwen2.5-1.5B: 28 layers, hidden 1536, 12 heads / 2 KV heads of 128, MLP 8960.
    "1.5b": ModelShape("1.5b", 1.54e9, 28, 1536, 12, 2, 128, 8960, 151_936),
    # Qwen2.5-7B: 28 layers, hidden 3584, 28 heads / 4 KV heads of 128, MLP 18944.
    "7b": ModelShape("7b", 7.62e9, 28, 3584, 28, 4, 128, 18_944, 152_064),
    # Qwen2.5-32B: 64 layers, hidden 5120, 40 heads / 8 KV heads of 128, MLP 27648.
    "32b": ModelShape("32b", 32.8e9, 64, 5120, 40, 8, 128, 27_648, 152_064),
    # Llama-3-70B: 80 layers, hidden 8192, 64 heads / 8 KV heads of 128, MLP 28672.
    "70b": ModelShape("70b", 70.6e9, 80, 8192, 64, 8, 128, 28_672, 128_256),
}


def model_shape(name: str) -> ModelShape:
    """The shape called `name`; KeyError names the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model size {name!r} (known: {', '.join(MODELS)})") from None
