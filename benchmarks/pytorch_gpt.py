#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo, one thread per rank) training the GPT of
plugins/models/gpt as people write it in PyTorch: the reference mgtrain's language-model targets
compare against. Same model, initialisation, optimizer, schedule, global batch and data (byte
tokens of the same text files mgtrain converts). Prints one JSON line from rank 0.

    python3 benchmarks/pytorch_gpt.py --train data/cookie_train.txt --world 2 --steps 100
    python3 benchmarks/pytorch_gpt.py --train data/cookie_train.txt --test data/cookie_test.txt \
        --world 2 --steps 600 --warmup 0 --eval
    python3 benchmarks/pytorch_gpt.py --train data/cookie_train.txt --world 1 --steps 20 --profile 30

benchmarks/compare_gpt.sh runs it from a venv holding PyTorch from PyPI.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from pytorch_ddp import peak_rss_mb


class Block(nn.Module):
    """x + proj(attn(LN(x))), then x + proj(GELU_tanh(fc(LN(x)))); no dropout."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.gelu = nn.GELU(approximate="tanh")
        self.fc_proj = nn.Linear(4 * dim, dim)

    def attention(self, x):
        b, t, d = x.shape
        # [B, T, 3 * dim] -> three [B, heads, T, head_dim], the layout the fused kernel takes.
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        # mgtrain's gpt: N(0, 0.02) for every weight matrix and both embeddings, zero biases,
        # LayerNorm at (1, 0) as PyTorch's default.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        # The head tied to the token embedding, no bias.
        return self.ln_f(x) @ self.wte.weight.T


def read_tokens(path):
    """Byte tokens, as `mgtrain data convert --text` writes them (vocabulary 256)."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def test_loss(model, tokens, context, batch):
    """Mean per-token cross-entropy (nats) over the contiguous windows of the file: window i is
    tokens [i * context, i * context + context], as mgtrain reads a test file. Every rank
    evaluates all windows (the file is small); the model is the same on every rank."""
    windows = (tokens.numel() - 1) // context
    total, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, windows, batch):
            rows = torch.arange(first, min(first + batch, windows))[:, None] * context + torch.arange(context + 1)
            w = tokens[rows].to(torch.int64)
            logits = model(w[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += w[:, 1:].numel()
    return total / count


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    train = read_tokens(args.train)
    T = args.context
    net = Gpt(256, T, args.dim, args.layers, args.heads)
    model = nn.parallel.DistributedDataParallel(net)
    # Weight decay on the matrices and embeddings alone, as examples/text_gpt.ini sets it
    # (optimizer.weight_decay_on = matrices): two parameter groups, as GPT-2-style training has.
    decayed = [p for p in model.parameters() if p.dim() >= 2]
    spared = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": args.weight_decay}, {"params": spared, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    # Linear warm-up from lr / warmup at the first step to lr, then constant: mgtrain's
    # train.warmup_steps with lr_schedule = constant.
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.lr_warmup))
    local = args.global_batch // args.world
    # The same global batch of windows at any world size: every rank draws the whole batch's
    # offsets from one generator and takes its share.
    generator = torch.Generator().manual_seed(args.seed)
    span = torch.arange(T + 1)
    start = None
    profiler = None
    total = args.warmup + args.steps
    for step in range(total):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
            if rank == 0 and args.profile:
                profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                profiler.__enter__()
        offsets = torch.randint(0, train.numel() - T, (args.global_batch,), generator=generator)
        # The batch is made in the training loop, as a script without DataLoader workers does.
        w = train[offsets[rank * local:(rank + 1) * local, None] + span].to(torch.int64)
        opt.zero_grad(set_to_none=True)
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        schedule.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if profiler is not None:
        profiler.__exit__(None, None, None)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile),
              file=sys.stderr, flush=True)
    # The final loss of the global batch, as mgtrain reports it.
    final = loss.detach().clone()
    dist.all_reduce(final)
    final = final.item() / args.world
    result_test = test_loss(net, read_tokens(args.test), T, args.global_batch) if args.eval else None
    rss = torch.zeros(args.world)
    rss[rank] = peak_rss_mb()
    dist.all_reduce(rss)
    if rank == 0:
        samples_per_s = args.steps * args.global_batch / seconds
        out = {"framework": "pytorch-ddp-gloo", "torch": torch.__version__, "model": "gpt",
               "world_size": args.world, "steps": args.steps, "steps_run": total,
               "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * T,
               "final_loss": final, "peak_rss_mb": float(rss.max()),
               "peak_rss_mb_ranks": [round(float(r), 1) for r in rss]}
        if result_test is not None:
            out["test_loss"] = result_test
        print(json.dumps(out), flush=True)
    # Every rank done with the group before any tears it down.
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.15's interpreter teardown at times aborts with "terminate called without an active
    # exception" (a joinable thread destroyed) after all is done; the run's figures are out.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True, help="training text (byte tokens)")
    p.add_argument("--test", help="test text, read by --eval")
    p.add_argument("--eval", action="store_true", help="report test_loss after training")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed steps first (they train: steps_run = warmup + steps)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW's decay of the matrices and embeddings")
    p.add_argument("--lr-warmup", type=int, default=100, help="steps of linear learning-rate warm-up")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    p.add_argument("--profile", type=int, default=0, metavar="ROWS",
                   help="rank 0's torch.profiler table of the timed steps, this many ops, on stderr")
    args = p.parse_args()
    if args.eval and not args.test:
        p.error("--eval needs --test")
    if args.global_batch % args.world:
        p.error(f"--global-batch {args.global_batch} is not a multiple of --world {args.world}")
    port = args.port
    if port == 0:
        # A fixed port can still be held by the previous run's ranks when runs follow each other.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
