#!/usr/bin/env python3
"""PyTorch eager on one GPU: the reference for mgtrain's GPU throughput targets. Same models,
optimizer and batch as examples/fashion_mnist_{mlp,cnn}.ini, in FP32 without TF32 (the math
mgtrain's GPU path does), the data already on the GPU. Prints one JSON line.

    python3 benchmarks/pytorch_gpu.py --model mlp --images t10k-images-idx3-ubyte.gz \
        --labels t10k-labels-idx1-ubyte.gz --steps 300
"""
import argparse
import json
import time

import torch
import torch.nn as nn

from pytorch_ddp import load_idx, make_model, to_float  # the same data and models as the CPU reference


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--images", required=True)
    p.add_argument("--labels", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    x, y = load_idx(args.images, args.labels)
    # Normalised once, on the GPU, as mgtrain's in-memory data is before the timed steps.
    x, y = to_float(x.to(dev)), y.to(dev)
    model = make_model(args).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    per_epoch = x.shape[0] // args.batch
    generator = torch.Generator(device=dev).manual_seed(args.seed)
    perm = torch.randperm(x.shape[0], generator=generator, device=dev)
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        b = step % per_epoch
        if b == 0 and step > 0:
            perm = torch.randperm(x.shape[0], generator=generator, device=dev)
        rows = perm[b * args.batch:(b + 1) * args.batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "pytorch-eager", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "model": args.model, "steps": args.steps, "batch": args.batch,
                      "samples_per_s": args.steps * args.batch / seconds, "final_loss": float(loss)}), flush=True)


if __name__ == "__main__":
    main()
