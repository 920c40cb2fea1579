#!/usr/bin/env python3
"""Predicted step time and scaling efficiency of the example models at 8 to 4096 GPUs.

The cost model of docs/scaling.md: a step is compute, then the part of the gradient all-reduce
that backward does not hide. Every input is a named constant below, measured here (the
simulated-network fit, benchmarks/alpha_beta.sh) or published (with its source in
docs/scaling.md); change one and run again. Prints one table per model and regime.
Usage: benchmarks/scaling_model.py [--per-gpu-batch 128]
"""
import argparse
import math

# Published link figures (docs/scaling.md, "Sources").
GPUS_PER_NODE = 8
NVLINK_BUSBW = 475e9  # bytes/s: 8 GPUs' all-reduce bus bandwidth over NVLink 4 / NVSwitch
NIC_BW = 400e9 / 8  # bytes/s: one 400 Gb/s NIC per GPU
NIC_EFFICIENCY = 0.9  # of NIC_BW that NCCL's inter-node rings reach at large messages
ALPHA_NODE = 8e-6  # s: latency of an all-reduce inside one node (NCCL, small messages)
ALPHA_HOP = 5e-6  # s: each inter-node step of a tree all-reduce (network plus NCCL)

# The GPU's compute, an assumption (docs/scaling.md says why): these models' small layers reach
# a small share of an H200's peak, and each kernel costs a launch.
GPU_FLOPS = 20e12  # FLOP/s reached by small convolutions and GEMMs in FP32/TF32
KERNEL_S = 2e-6  # s per kernel of a step recorded as a CUDA graph
BACKWARD_SHARE = 2.0 / 3.0  # of a step's compute that is backward, during which buckets can go

# The example models: parameters (so gradient bytes), FLOPs per sample for forward and backward
# (3 x 2 x multiply-adds of a 28x28 grey image), kernels per step.
MODELS = {
    "mlp": dict(params=235_152, flops=3 * 2 * 235_000, kernels=25),
    "cnn": dict(params=421_648, flops=3 * 2 * 4_230_000, kernels=40),
    "resnet": dict(params=272_976, flops=3 * 2 * 31_300_000, kernels=220),
}
DATASET_ROWS = 60_000  # Fashion-MNIST's training set


def allreduce_seconds(gpus, n_bytes):
    """Inside one node over NVLink; across nodes bound by each GPU's NIC, with a tree's latency."""
    if gpus <= GPUS_PER_NODE:
        return ALPHA_NODE + 2 * (gpus - 1) / gpus * n_bytes / NVLINK_BUSBW
    nodes = gpus // GPUS_PER_NODE
    bandwidth = 2 * (gpus - 1) / gpus * n_bytes / (NIC_BW * NIC_EFFICIENCY)
    return ALPHA_NODE + 2 * math.log2(nodes) * ALPHA_HOP + bandwidth


def compute_seconds(model, batch):
    return max(batch * model["flops"] / GPU_FLOPS, model["kernels"] * KERNEL_S)


def table(name, model, per_gpu_batch, overlap):
    n_bytes = 4 * model["params"]
    alone = compute_seconds(model, per_gpu_batch)
    print(f"{name}: {n_bytes / 1e6:.2f} MB of gradients, {alone * 1e3:.3f} ms compute per step at "
          f"{per_gpu_batch} samples per GPU, {'overlapped' if overlap else 'not overlapped'}")
    print(f"  {'GPUs':>5} {'global batch':>12} {'steps/epoch':>11} {'all-reduce ms':>13} {'exposed ms':>10} "
          f"{'step ms':>8} {'efficiency':>10}")
    for gpus in (8, 64, 512, 4096):
        reduce_s = allreduce_seconds(gpus, n_bytes)
        exposed = max(0.0, reduce_s - BACKWARD_SHARE * alone) if overlap else reduce_s
        step = alone + exposed
        batch = per_gpu_batch * gpus
        print(f"  {gpus:>5} {batch:>12} {DATASET_ROWS / batch:>11.2f} {reduce_s * 1e3:>13.3f} {exposed * 1e3:>10.3f} "
              f"{step * 1e3:>8.3f} {alone / step:>10.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-gpu-batch", type=int, default=128)
    args = parser.parse_args()
    for name, model in MODELS.items():
        for overlap in (False, True):
            table(name, model, args.per_gpu_batch, overlap)


if __name__ == "__main__":
    main()
