#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo, one thread per rank) on Fashion-MNIST: the reference
mgtrain's throughput targets compare against. Same models, optimizer and global batch as
examples/fashion_mnist_{mlp,cnn}.ini. Prints one JSON line from rank 0.

    python3 benchmarks/pytorch_ddp.py --model mlp --world 2 --steps 300
"""
import argparse
import gzip
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

RAW = "/usr/share/datasets/fashion-mnist"


# torch alone, no numpy: PyTorch's wheels do not install it, and a GPU machine may lack it.
def load_idx(images, labels):
    with gzip.open(images, "rb") as f:
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(labels, "rb") as f:
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8, offset=8)
    x = (x.to(torch.float32) / 255.0 - 0.286041) / 0.353024  # the HDF5 file's mean and std
    return x, y.to(torch.int64)


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    x, y = load_idx(f"{RAW}/train-images-idx3-ubyte.gz", f"{RAW}/train-labels-idx1-ubyte.gz")
    model = nn.parallel.DistributedDataParallel(make_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    local = args.global_batch // args.world
    per_epoch = x.shape[0] // args.global_batch
    generator = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(x.shape[0], generator=generator)
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        b = step % per_epoch
        if b == 0 and step > 0:
            perm = torch.randperm(x.shape[0], generator=generator)
        rows = perm[b * args.global_batch + rank * local: b * args.global_batch + (rank + 1) * local]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"framework": "pytorch-ddp-gloo", "torch": torch.__version__, "model": args.model,
                          "world_size": args.world, "steps": args.steps,
                          "samples_per_s": args.steps * args.global_batch / seconds,
                          "final_loss": float(loss), "peak_rss_mb": float(rss)}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    mp.spawn(worker, args=(args, args.port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
