#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo, one thread per rank) on Fashion-MNIST: the reference
mgtrain's throughput targets compare against. Same models, optimizer, data and global batch as
examples/fashion_mnist_{mlp,cnn,resnet}.ini. Prints one JSON line from rank 0.

    python3 benchmarks/pytorch_ddp.py --model resnet --world 2 --steps 100
    python3 benchmarks/pytorch_ddp.py --model resnet --world 2 --steps 20 --profile 30

benchmarks/compare_pytorch.sh runs it from a venv holding PyTorch from PyPI.
"""
import argparse
import gzip
import json
import os
import resource
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

RAW = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.286041, 0.353024  # the HDF5 file's, which mgtrain's reader applies


# Each rank holds the raw train set as uint8 (47 MB) and converts only the batch's rows to float32,
# as mgtrain's reader does with the rows it reads from the HDF5 file (it holds a few batches of
# float32, its prefetch slots, and none of the file: that stays in the page cache, outside RSS).
# Read straight into one buffer, so loading never holds two copies. torch alone, no numpy.
def load_idx(images, labels):
    with gzip.open(images, "rb") as f:
        _, n, h, w = struct.unpack(">IIII", f.read(16))
        pixels = bytearray(n * h * w)
        f.readinto(pixels)
        x = torch.frombuffer(pixels, dtype=torch.uint8)
    with gzip.open(labels, "rb") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    return x.reshape(n, 1, h, w), y.to(torch.int64)


def augment(x, generator, padding=4):
    """RandomCrop(28, padding) and RandomHorizontalFlip per sample, as data.augment = crop:4,flip:
    zero pixels around the raw image, so a padded pixel normalises to what a 0 does."""
    b, _, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    oy = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    ox = torch.randint(0, 2 * padding + 1, (b,), generator=generator)
    flip = torch.randint(0, 2, (b,), generator=generator).bool()
    ar_h, ar_w = torch.arange(h), torch.arange(w)
    cols = ox[:, None] + torch.where(flip[:, None], w - 1 - ar_w, ar_w)
    rows = oy[:, None] + ar_h
    return padded[torch.arange(b)[:, None, None], 0, rows[:, :, None], cols[:, None, :]].unsqueeze(1)


def to_float(x):
    return (x.to(torch.float32) / 255.0 - MEAN) / STD


class Block(nn.Module):
    """As plugins/models/resnet/resnet.cpp: conv3x3-bn-relu-conv3x3-bn plus the shortcut (a strided
    1x1 conv with bn where the shape changes), then relu. mgtrain's convolutions have a bias."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, depth=20, width=16, classes=10):
        super().__init__()
        assert depth >= 8 and (depth - 2) % 6 == 0, "depth must be 6n + 2"
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(1, width, 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage in range(3):
            cout = width << stage
            for b in range(n):
                blocks.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)
        # mgtrain: He-uniform convolutions with zero biases; the classifier as nn.Linear's default.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(args):
    if args.model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if args.model == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    return ResNet(args.depth)


# The examples' SGD (momentum 0.9): learning rate, weight decay, and whether data.augment is set
# (crop:4,flip for resnet, which mgtrain bench keeps).
SETTINGS = {"mlp": (0.05, 0.0, False), "cnn": (0.02, 0.0, False), "resnet": (0.1, 5e-4, True)}


def peak_rss_mb():
    """This process's peak resident memory over its life (VmHWM, as ru_maxrss), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    x, y = load_idx(f"{RAW}/train-images-idx3-ubyte.gz", f"{RAW}/train-labels-idx1-ubyte.gz")
    lr, weight_decay, augmenting = SETTINGS[args.model]
    lr = args.lr or lr
    model = nn.parallel.DistributedDataParallel(make_model(args))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    local = args.global_batch // args.world
    per_epoch = x.shape[0] // args.global_batch
    generator = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(x.shape[0], generator=generator)
    profiler = None
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            if rank == 0 and args.profile:
                profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                profiler.__enter__()
        b = step % per_epoch
        if b == 0 and step > 0:
            perm = torch.randperm(x.shape[0], generator=generator)
        rows = perm[b * args.global_batch + rank * local: b * args.global_batch + (rank + 1) * local]
        # The batch is made here, in the training loop, as a script without DataLoader workers
        # does; mgtrain's reader makes it on a prefetch thread of the rank.
        xb = x[rows]
        if augmenting:
            xb = augment(xb, generator)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(to_float(xb)), y[rows])
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if profiler is not None:
        profiler.__exit__(None, None, None)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile),
              file=sys.stderr, flush=True)
    rss = torch.zeros(args.world)
    rss[rank] = peak_rss_mb()
    dist.all_reduce(rss)
    if rank == 0:
        print(json.dumps({"framework": "pytorch-ddp-gloo", "torch": torch.__version__, "model": args.model,
                          "world_size": args.world, "steps": args.steps,
                          "samples_per_s": args.steps * args.global_batch / seconds,
                          "final_loss": loss.item(), "peak_rss_mb": float(rss.max()),
                          "peak_rss_mb_ranks": [round(float(r), 1) for r in rss]}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn", "resnet"], default="mlp")
    p.add_argument("--depth", type=int, default=20, help="resnet: 6n + 2 layers with weights")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.0, help="learning rate (default: the example's)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--profile", type=int, default=0, metavar="ROWS",
                   help="rank 0's torch.profiler table of the timed steps, this many ops, on stderr")
    args = p.parse_args()
    mp.spawn(worker, args=(args, args.port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
