#!/usr/bin/env bash
# TensorBoard event files: a 2-rank run with metrics.tensorboard_dir set is read back with the
# `tensorboard` package's own readers (tests/e2e/read_tfevents.py): the scalar tags, their steps,
# values equal to metrics.jsonl, and a CRC check that catches a flipped byte.
# Needs python3 with the venv module (Debian: python3-venv) and PyPI for `pip install tensorboard`,
# into "$WORK/../tb-venv" (TB_VENV overrides), reused by later runs. Exits 77 (skip) without them.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
write_config run.ini
run_np 2 300 train --config run.ini --train.max_steps=100 --train.log_every=20 \
  --metrics.tensorboard_dir="$WORK/tb" >train.log 2>&1 || { cat train.log; fail "training run"; }
ls "$WORK"/tb/events.out.tfevents.* >/dev/null 2>&1 || { ls -la "$WORK/tb" || true; fail "no event file in $WORK/tb"; }
[[ -s "$WORK/ckpt/metrics.jsonl" ]] || fail "no metrics file $WORK/ckpt/metrics.jsonl"

skip() { echo "SKIP: $*" >&2; exit 77; }
python=${PYTHON:-python3}
venv=${TB_VENV:-$WORK/../tb-venv}
has_tensorboard() { "$venv/bin/python" -c "import tensorboard" >/dev/null 2>&1; }
if ! has_tensorboard; then
  command -v "$python" >/dev/null || skip "no $python on PATH (Debian: apt-get install python3 python3-venv)"
  if [[ ! -x "$venv/bin/pip" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv" >venv.log 2>&1 || {
      cat venv.log; rm -rf "$venv"
      skip "'$python -m venv' failed: the venv module or ensurepip is missing (Debian: apt-get install python3-venv)"; }
  fi
  "$venv/bin/pip" install --disable-pip-version-check -q tensorboard >pip.log 2>&1 || {
    tail -20 pip.log
    skip "'pip install tensorboard' into $venv failed (is PyPI reachable?)"; }
  has_tensorboard || fail "tensorboard installed into $venv but cannot be imported"
fi
echo "tensorboard $("$venv/bin/python" -c 'import tensorboard; print(tensorboard.__version__)') from $venv"
"$venv/bin/python" "$HERE/read_tfevents.py" "$WORK/tb" "$WORK/ckpt/metrics.jsonl" "$WORK/corrupt" ||
  fail "read_tfevents.py"
