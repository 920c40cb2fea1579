"""Checks an ONNX file written by `mgtrain export` against `mgtrain eval` of the same checkpoint.

usage: onnx_check.py MODEL.onnx DATA.h5 LOGITS.npy [--checkpoint CKPT.h5] [--min-agreement 0.999]
                     [--max-diff 1e-4]

- onnx.checker (full check, with shape inference) accepts the model; its input is "input",
  float32 [N, ...] with a symbolic batch dimension, its output "logits";
- ONNX Runtime, fed the data file's samples as stored (raw pixels), gives arg-max predictions that
  agree with eval's logits (LOGITS.npy, `mgtrain eval --logits`) on at least --min-agreement of
  the rows, and logits within --max-diff of them; batches of 1, 7 and 1000 rows give the same;
- with --checkpoint, its batch-norm running statistics are not their initial values (the
  comparison would not see them used otherwise).
Prints one line of figures; exits 1 with a FAIL line otherwise.
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
    args = parser.parse_args()

    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
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


if __name__ == "__main__":
    main()
