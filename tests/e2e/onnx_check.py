"""Checks an ONNX file written by `mgtrain export` against `mgtrain eval` of the same checkpoint.

usage: onnx_check.py MODEL.onnx DATA.h5 LOGITS.npy [--checkpoint CKPT.h5] [--min-agreement 0.999]
                     [--max-diff 1e-4] [--loss EVAL_LOSS] [--max-loss-diff 1e-4]

A sample file (/x, /y):
- onnx.checker (full check, with shape inference) accepts the model; its input is "input",
  float32 [N, ...] with a symbolic batch dimension, its output "logits";
- ONNX Runtime, fed the data file's samples as stored (raw pixels), gives arg-max predictions that
  agree with eval's logits (LOGITS.npy, `mgtrain eval --logits`) on at least --min-agreement of
  the rows, and logits within --max-diff of them; batches of 1, 7 and 1000 rows give the same;
- with --checkpoint, its batch-norm running statistics are not their initial values (the
  comparison would not see them used otherwise).
A token file (/tokens; a language model):
- the checker accepts the model; its input is "input", int64 [N, T] with N and T symbolic, its
  output "logits" [N, T, vocab]; no large initializer is written twice (a tied head reads the
  embedding's table);
- fed the file's windows as eval reads them (window i: tokens [i T, (i + 1) T)), ONNX Runtime's
  logits are within --max-diff of eval's [N, T, vocab] and their arg-max agrees on at least
  --min-agreement of the tokens; their mean cross-entropy against the next tokens is within
  --max-loss-diff of eval's test loss (--loss, nats per token); batches of 1 and 7 windows give the
  same, and so do the first 1 and 17 tokens of each window alone (causal: a token's logits do not
  depend on the tokens after it).
Prints the figures; exits 1 with a FAIL line otherwise.
"""
import argparse
import sys

import h5py
import numpy as np
import onnx
import onnxruntime as ort


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("logits")
    parser.add_argument("--checkpoint")
    parser.add_argument("--min-agreement", type=float, default=0.999)
    parser.add_argument("--max-diff", type=float, default=1e-4)
    parser.add_argument("--loss", type=float, help="eval's test loss, nats per token (token files)")
    parser.add_argument("--max-loss-diff", type=float, default=1e-4)
    args = parser.parse_args()

    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
    with h5py.File(args.data, "r") as f:
        tokens = "tokens" in f
    if tokens:
        check_tokens(args, model)
    else:
        check_samples(args, model)


def check_samples(args, model):
    graph = model.graph
    if [i.name for i in graph.input] != ["input"] or [o.name for o in graph.output] != ["logits"]:
        fail(f"inputs {[i.name for i in graph.input]}, outputs {[o.name for o in graph.output]}; "
             "expected ['input'] and ['logits']")
    batch_dim = graph.input[0].type.tensor_type.shape.dim[0]
    if batch_dim.dim_param != "N":
        fail(f"the input's first dimension is {batch_dim}, expected the symbolic N")
    ops = sorted({node.op_type for node in graph.node})

    with h5py.File(args.data, "r") as f:
        x = f["x"][...].astype(np.float32)  # the samples as stored: uint8 pixels become 0..255
        y = f["y"][...]
    expected = np.load(args.logits)
    if expected.shape[0] != x.shape[0]:
        fail(f"eval wrote logits for {expected.shape[0]} rows, the data file has {x.shape[0]}")

    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run(["logits"], {"input": x[i:i + 1000]})[0] for i in range(0, len(x), 1000)])
    if got.shape != expected.shape:
        fail(f"ONNX Runtime gives logits of shape {got.shape}, eval {expected.shape}")
    for rows in (1, 7):
        small = session.run(["logits"], {"input": x[:rows]})[0]
        if not np.allclose(small, got[:rows], rtol=0, atol=1e-5):
            fail(f"a batch of {rows} rows gives other logits than batches of 1000")

    agree = float(np.mean(got.argmax(1) == expected.argmax(1)))
    diff = float(np.max(np.abs(got - expected)))
    accuracy = float(np.mean(got.argmax(1) == y))
    print(f"{args.model}: {len(x)} rows, argmax agreement {agree:.4%}, max |logit diff| {diff:.3g}, "
          f"accuracy {accuracy:.4f}; opset {model.opset_import[0].version}, ops {', '.join(ops)}")
    if agree < args.min_agreement:
        fail(f"predictions agree on {agree:.4%} of the rows, expected at least {args.min_agreement:.4%}")
    if not diff <= args.max_diff:
        fail(f"logits differ by up to {diff:.3g}, expected at most {args.max_diff:g}")

    if args.checkpoint:
        with h5py.File(args.checkpoint, "r") as f:
            names = [n for n in f["buffers"]] if "buffers" in f else []
            means = [n for n in names if n.endswith("running_mean")]
            if not means:
                fail(f"{args.checkpoint} holds no batch-norm running statistics under /buffers")
            moved = [n for n in means if np.any(f["buffers"][n][...] != 0)]
            varied = [n for n in names if n.endswith("running_var") and np.any(f["buffers"][n][...] != 1)]
            if len(moved) != len(means) or len(varied) != len(means):
                fail(f"running statistics still at their initial values: {sorted(set(means) - set(moved))}")
            print(f"{len(means)} batch norms, every running mean and variance moved from 0 and 1")


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def check_tokens(args, model):
    graph = model.graph
    if [i.name for i in graph.input] != ["input"] or [o.name for o in graph.output] != ["logits"]:
        fail(f"inputs {[i.name for i in graph.input]}, outputs {[o.name for o in graph.output]}; "
             "expected ['input'] and ['logits']")
    if graph.input[0].type.tensor_type.elem_type != onnx.TensorProto.INT64 or dims(graph.input[0]) != ["N", "T"]:
        fail(f"the input is {onnx.TensorProto.DataType.Name(graph.input[0].type.tensor_type.elem_type)} "
             f"{dims(graph.input[0])}, expected INT64 ['N', 'T']")
    if args.loss is None:
        fail("a token file needs --loss, eval's test loss")
    # A table written twice (a tied head with a copy of the embedding's) shows as equal bytes.
    large = {}
    for t in graph.initializer:
        if len(t.raw_data) >= 4096:
            if t.raw_data in large:
                fail(f"initializers {large[t.raw_data]} and {t.name} hold the same values")
            large[t.raw_data] = t.name

    expected = np.load(args.logits)
    if expected.ndim != 3:
        fail(f"eval wrote logits of shape {expected.shape}, expected [N, T, vocab]")
    windows, context, vocab = expected.shape
    if dims(graph.output[0]) != ["N", "T", vocab]:
        fail(f"the output is {dims(graph.output[0])}, expected ['N', 'T', {vocab}]")
    metadata = {p.key: p.value for p in model.metadata_props}
    if metadata.get("mgtrain.context") != str(context):
        fail(f"metadata mgtrain.context is {metadata.get('mgtrain.context')}, eval's windows hold {context}")
    with h5py.File(args.data, "r") as f:
        stream = f["tokens"][...].astype(np.int64)
    if (len(stream) - 1) // context != windows:
        fail(f"eval wrote logits for {windows} windows, the file's {len(stream)} tokens give "
             f"{(len(stream) - 1) // context}")
    starts = np.arange(windows)[:, None] * context + np.arange(context)[None, :]
    x, targets = stream[starts], stream[starts + 1]

    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run(["logits"], {"input": x[i:i + 64]})[0] for i in range(0, windows, 64)])
    if got.shape != expected.shape:
        fail(f"ONNX Runtime gives logits of shape {got.shape}, eval {expected.shape}")
    for rows in (1, 7):
        small = session.run(["logits"], {"input": x[:rows]})[0]
        if not np.allclose(small, got[:rows], rtol=0, atol=1e-5):
            fail(f"a batch of {rows} windows gives other logits than batches of 64")
    for length in (1, 17):
        prefix = session.run(["logits"], {"input": x[:, :length]})[0]
        if not np.allclose(prefix, got[:, :length], rtol=0, atol=1e-5):
            fail(f"the first {length} tokens alone give other logits than in the whole window: "
                 f"max difference {np.max(np.abs(prefix - got[:, :length])):.3g}")

    diff = np.abs(got - expected)
    max_diff = float(np.max(diff))
    relative = max_diff / float(np.max(np.abs(expected)))
    agree = float(np.mean(got.argmax(-1) == expected.argmax(-1)))
    logits = got.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    loss = float(-np.mean(np.take_along_axis(log_probs, targets[..., None], -1)))
    ops = ", ".join(sorted({n.op_type for n in graph.node}))
    print(f"{args.model}: {windows} windows of {context} tokens, vocab {vocab}; logits: max |diff| {max_diff:.3g} "
          f"({relative:.3g} of the largest |logit|), arg-max agreement {agree:.4%}; cross-entropy {loss:.6f} "
          f"nats/token, eval {args.loss:.6f} (diff {abs(loss - args.loss):.2g}); opset "
          f"{model.opset_import[0].version}, {len(graph.node)} nodes, ops {ops}")
    if agree < args.min_agreement:
        fail(f"arg-max agrees on {agree:.4%} of the tokens, expected at least {args.min_agreement:.4%}")
    if not max_diff <= args.max_diff:
        fail(f"logits differ by up to {max_diff:.3g}, expected at most {args.max_diff:g}")
    if not abs(loss - args.loss) <= args.max_loss_diff:
        fail(f"cross-entropy {loss:.6f} against eval's {args.loss:.6f}, expected within {args.max_loss_diff:g}")


if __name__ == "__main__":
    main()
