#!/usr/bin/env bash
# Where a training step of the gpt of examples/text_gpt.ini goes on one rank, against what its
# GEMMs could do: one rank alone at the global batch (BATCH windows of 128 tokens, 32 as the
# example), all figures per step.
#
# 1. mgtrain bench --json at np=1: the step time and its split.
# 2. The same with benchmarks/sgemm_shapes.cpp preloaded: the time and rate of each GEMM shape as
#    the step runs it (operands where the step left them, not warm in cache).
# 3. perf (Debian: linux-perf), where there is one: the rest of the step by function (oneDNN's
#    JIT GEMM kernels show as one "[JIT]" figure, their callers cannot be unwound).
# 4. The timeline (metrics.trace) of a training run of the same steps: time per layer.
# 5. benchmarks/gemm_rate.sh: oneDNN's single-thread sgemm at the same shapes, operands warm; the
#    step's GEMM FLOPs (forward 2mnk per GEMM, backward twice that, attention's full T x T
#    products per head, the tied head) over the step time, against that rate.
#
# Usage: benchmarks/profile_gpt.sh [STEPS=60] [BATCH=32]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${1:-60} batch=${2:-32} warmup=5
source "$here/setup.sh"
prepare_cookie "$mgtrain"
config=examples/text_gpt.ini
run=(--config "$config" --steps "$steps" --warmup "$warmup" --json --train.global_batch="$batch")
steps_run=$((steps + warmup))
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" <<<"$2"; }

shim=$MGTRAIN_BUILD/lib/libsgemm_shapes.so
mkdir -p "$(dirname "$shim")"
g++ -std=c++20 -O2 -shared -fPIC "$here/sgemm_shapes.cpp" -ldl -o "$shim"

echo "== 1. mgtrain bench, one rank, $batch windows a step ($(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'))"
line=$("$mgtrain" bench "${run[@]}" | grep '^{')
echo "$line"
step_ms=$(awk -v s="$(field samples_per_s "$line")" -v b="$batch" 'BEGIN { printf "%.2f", 1e3 * b / s }')
echo "step $step_ms ms: forward+backward $(field compute_ms "$line") ms, optimizer $(field optimizer_ms "$line") ms"

echo "== 2. its GEMMs by shape, per step (all $steps_run steps run; ms and calls divided by them)"
LD_PRELOAD=$shim "$mgtrain" bench "${run[@]}" 2>&1 >/dev/null | sed -n 's/^sgemm_shapes (pid [0-9]*): //p' |
  awk -v n="$steps_run" '
    /^op/ { printf "%-4s %6s %6s %6s %5s %5s %5s %8s %9s %8s\n", "op", "m", "n", "k", "lda", "ldb", "ldc", "calls", "ms/step", "GFLOP/s"; next }
    /^total/ { gsub(",", ""); printf "total: %.0f calls, %.2f ms, %.3f GFLOP a step, %s GFLOP/s\n", $2 / n, $4 / n, $6 / n, $8; next }
    { printf "%-4s %6s %6s %6s %5s %5s %5s %8.0f %9.2f %8s\n", $1, $2, $3, $4, $5, $6, $7, $8 / n, $9 / n, $10 }'

echo "== 3. the step by function (perf, ms per step)"
if command -v perf >/dev/null && perf record -q -F 1999 -o "$MGTRAIN_BUILD/profile_gpt.perf" "$mgtrain" bench "${run[@]}" >/dev/null 2>&1; then
  perf report -i "$MGTRAIN_BUILD/profile_gpt.perf" --no-children --sort dso,symbol --stdio -F overhead,sample,dso,symbol 2>/dev/null |
    awk -v n="$steps_run" '
      /^#/ || NF < 4 { next }
      { dso = $3; sym = $5; for (i = 6; i <= NF; ++i) sym = sym " " $i; sub(/( +-)+ *$/, "", sym)
        if (dso ~ /JIT/) { jit += $2; next }
        ms[dso " " sym] += $2; total += $2 }
      END { printf "%9.2f  [JIT] oneDNN GEMM kernels\n", jit / 1999 / n * 1e3
            for (k in ms) if (ms[k] / 1999 / n * 1e3 >= 0.3) printf "%9.2f  %s\n", ms[k] / 1999 / n * 1e3, k
            printf "%9.2f  (all: CPU time of the rank a step, start-up included; time preempted is not in it)\n",
              (jit + total) / 1999 / n * 1e3 }' | sort -rn
else
  echo "(no perf: apt-get install linux-perf, and perf_event_paranoid <= 1)"
fi

echo "== 4. the step by layer, forward and backward together (the timeline, metrics.trace; ms per step)"
trace=$MGTRAIN_BUILD/profile_gpt.trace.json
"$mgtrain" train --config "$config" --train.global_batch="$batch" --train.max_steps="$steps_run" \
  --train.epochs=1000000 --data.test= --metrics.trace="$trace" --checkpoint.dir="$MGTRAIN_BUILD/profile_gpt.run" \
  --checkpoint.overwrite=true >/dev/null
python3 - "$trace" "$warmup" <<'EOF'
import collections, json, re, sys
trace, warmup = sys.argv[1], int(sys.argv[2])
events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
steps = sorted((e for e in events if e["name"] == "step"), key=lambda e: e["ts"])[warmup:]
start, end = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
# Blocks h0, h1, ... summed by what their layers are (h0.attn and h3.attn: attn).
ms = collections.defaultdict(float)
for e in events:
    if start <= e["ts"] < end and e["name"] not in ("checkpoint", "evaluation"):
        ms[re.sub(r"^h\d+\.", "", e["name"])] += e["dur"] / 1e3 / len(steps)
for name, t in sorted(ms.items(), key=lambda kv: -kv[1]):
    if t >= 0.1:
        print(f"{t:9.2f}  {name}")
EOF

echo "== 5. oneDNN sgemm alone at the same shapes (one thread, operands warm)"
rates=$("$here/gemm_rate.sh" "$batch")
echo "$rates"
rate=$(tail -1 <<<"$rates")
awk -v f="$(field gemm_gflop "$rate")" -v ms="$step_ms" -v r="$(field gemm_gflops "$rate")" 'BEGIN {
  printf "step: %.3f GFLOP of GEMMs in %.2f ms = %.1f GFLOP/s on one core; sgemm at the same shapes %.1f GFLOP/s (%.0f%% of it)\n",
    f, ms, f / ms * 1e3, r, 100 * f / ms * 1e3 / r }'
