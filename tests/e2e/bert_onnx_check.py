"""Checks a bert encoder's ONNX file (`mgtrain export`) with onnx.checker and ONNX Runtime.

usage: bert_onnx_check.py MODEL.onnx DATA.h5 CONTEXT VOCAB

- onnx.checker (full check, with shape inference) accepts it; its input is "input", int64 [N, T],
  its output "logits" [N, T, VOCAB];
- fed windows of the token file, ONNX Runtime gives finite logits of that shape; a batch of 1
  gives the first window's logits of a batch of 3, and a window of 17 tokens runs too;
- attention is bidirectional: changing a window's last token changes its first position's
  logits (a causal graph would leave them as they were).
Prints the figures; exits 1 with a FAIL line otherwise.
"""
import sys

import h5py
import numpy as np
import onnx
import onnxruntime as ort


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    path, data, context, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    tokens = h5py.File(data, "r")["tokens"][: 3 * context].astype(np.int64)
    windows = tokens.reshape(3, context)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input": windows})[0]
    if logits.shape != (3, context, vocab):
        fail(f"logits of shape {logits.shape}, expected (3, {context}, {vocab})")
    if not np.isfinite(logits).all():
        fail("non-finite logits")
    one = session.run(["logits"], {"input": windows[:1]})[0]
    diff = float(np.abs(one - logits[:1]).max())
    if diff > 1e-5:
        fail(f"a batch of 1 differs from the first row of a batch of 3 by {diff}")
    short = session.run(["logits"], {"input": windows[:, :17]})[0]
    if short.shape != (3, 17, vocab):
        fail(f"a window of 17 tokens gave logits of shape {short.shape}")
    changed = windows.copy()
    changed[0, -1] = (changed[0, -1] + 1) % (vocab - 1)
    moved = float(np.abs(session.run(["logits"], {"input": changed})[0][0, 0] - logits[0, 0]).max())
    if moved == 0.0:
        fail("changing the last token left the first position's logits as they were: the attention is causal")
    print(f"bert ONNX: checker passed, logits {logits.shape}, batch of 1 within {diff:.1e}, "
          f"the first position moves by {moved:.3e} when the last token changes")


if __name__ == "__main__":
    main()
