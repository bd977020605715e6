"""The GPU models the simulator's cost model knows: memory, bandwidths and peak FLOP/s, each
figure with its source (the datasheets; `../shared/WORKLOADS.md`) or marked ASSUMPTION."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True, slots=True)
class GpuType:
    """What the cost model needs to know about one GPU model."""

    name: str
    hbm_capacity_bytes: float
    hbm_bytes_per_s: float
    peak_flops_per_s: float
    nvlink_bytes_per_s: float
    host_link_bytes_per_s: float


GPUS: dict[str, GpuType] = {
    "h100": GpuType(
        "h100",
        # H100 SXM: 80 GB HBM3 (NVIDIA datasheet; the stacks are binary gigabytes).
        hbm_capacity_bytes=80 * GIB,
        # 3.35 TB/s HBM and 989 TFLOP/s dense BF16 (WORKLOADS.md).
        hbm_bytes_per_s=3.35e12,
        peak_flops_per_s=989e12,
        # NVLink ~450 GB/s per direction (WORKLOADS.md).
        nvlink_bytes_per_s=450e9,
        # ASSUMPTION: PCIe Gen5 x16 is 64 GB/s per direction (datasheet); a host <-> GPU weight
        # copy while the node's other GPUs copy too is taken to reach 25 GB/s.
        host_link_bytes_per_s=25e9,
    ),
    "a100": GpuType(
        "a100",
        # A100 SXM 80GB: HBM2e 2,039 GB/s, 312 TFLOP/s dense BF16, NVLink 600 GB/s in both
        # directions together (NVIDIA A100 datasheet; not in WORKLOADS.md).
        hbm_capacity_bytes=80 * GIB,
        hbm_bytes_per_s=2.039e12,
        peak_flops_per_s=312e12,
        nvlink_bytes_per_s=300e9,
        # ASSUMPTION: PCIe Gen4 x16 is 32 GB/s per direction; 12 GB/s reached, as for the H100.
        host_link_bytes_per_s=12e9,
    ),
}
