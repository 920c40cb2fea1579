#!/usr/bin/env bash
# Every JSON line mgtrain writes is JSON to a real parser (Python's json, which refuses bare NaN
# when told to): a checkpoint directory with a quote, a backslash and a space in its name, and a
# run that diverges (lr 1e30, train.nonfinite = skip), whose non-finite losses are written as null.
# Then `mgtrain report` reads those lines back (the skipped steps' records too) and `mgtrain eval
# --json` parses.
source "$(dirname "$0")/lib.sh"
write_config run.ini
sed -i '/^test =/d' run.ini
dir="$WORK/say \"hi\" back\\slash"
run_np 2 120 train --config run.ini --train.max_steps=10 --train.log_every=5 --train.nonfinite=skip \
  --optimizer.lr=1e30 --checkpoint.dir="$dir" --json >out.log 2>&1 || { cat out.log; fail "training failed"; }
grep '^{' out.log | tail -n 1 >result.json
cat result.json "$dir/metrics.jsonl"

python3 - "$dir" result.json "$dir/metrics.jsonl" <<'PY' || fail "a JSON line is not what it should be"
import json, os, sys

def strict(text):  # NaN, Infinity and -Infinity are not JSON
    return json.loads(text, parse_constant=lambda c: sys.exit(f"bare {c} in {text!r}"))

run_dir, result_path, metrics_path = sys.argv[1:]
result = strict(open(result_path).read())
keys = ["steps", "steps_run", "samples", "train_seconds", "samples_per_s", "final_loss", "checkpoint",
        "world_size", "peak_rss_mb", "compute_ms", "sync_ms", "data_wait_ms", "optimizer_ms", "test_accuracy",
        "skipped_steps", "lost_ranks", "device"]
if list(result) != keys:
    sys.exit(f"result keys {list(result)}, expected {keys}")
if result["checkpoint"] != os.path.join(run_dir, "step-10.h5") or not os.path.exists(result["checkpoint"]):
    sys.exit(f"checkpoint {result['checkpoint']!r} is not the file written in {run_dir!r}")
if result["final_loss"] is not None:
    sys.exit(f"final_loss {result['final_loss']!r}: a diverged run's loss must be null")
records = [strict(line) for line in open(metrics_path)]
# Each skipped step has its own record ("nonfinite": the rank whose gradient held NaN or Inf).
skipped = [m for m in records if "nonfinite" in m]
lines = [m for m in records if "nonfinite" not in m]
if not skipped or any(m["action"] != "skip" or not isinstance(m["layer"], str) for m in skipped):
    sys.exit(f"non-finite records {skipped}")
if [m["step"] for m in lines] != [5, 10]:
    sys.exit(f"metrics steps {[m['step'] for m in lines]}")
if any(m["loss"] is not None for m in lines) or not all(isinstance(m["lr"], float) for m in lines):
    sys.exit("expected a null loss and a numeric lr in every metrics line")
print("ok: the result line and", len(lines), "metrics lines parse; non-finite losses are null")
PY

# The shell tests' way of reading these lines still works on them.
losses=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/metrics.jsonl" | sort -u)
[ "$losses" = null ] || fail "sed reads losses '$losses', expected null"
[ "$(json_field skipped_steps <result.json)" -gt 0 ] || fail "no skipped steps"

out=$("$MGTRAIN" report "$dir" 2>&1) || { echo "$out"; fail "mgtrain report refused the null losses"; }
echo "$out"
grep -qF "(2 points)" <<<"$out" || fail "unexpected report: $out"

"$MGTRAIN" eval --checkpoint "$dir/step-10.h5" --data "$DATA_DIR/test.h5" --json >eval.json ||
  fail "mgtrain eval failed"
cat eval.json
python3 -c 'import json, sys; assert list(json.load(open(sys.argv[1]))) == ["accuracy", "loss", "samples"]' \
  eval.json || fail "eval --json is not the expected JSON object"
echo "json_output OK"
