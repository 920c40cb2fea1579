#!/usr/bin/env bash
# `mgtrain report`: a short run on 2 ranks, then its metrics drawn as one self-contained SVG.
# Needs only coreutils, grep and sed (the SVG's XML is checked by the unit test's parser).
source "$(dirname "$0")/lib.sh"
write_config run.ini
run_np 2 300 train --config run.ini --train.max_steps=100 --train.log_every=10 >train.log 2>&1 ||
  { cat train.log; fail "training failed"; }
[ "$(grep -c '"step"' ckpt/metrics.jsonl)" = 10 ] || fail "expected 10 metrics lines, got $(wc -l <ckpt/metrics.jsonl)"

out=$("$MGTRAIN" report "$WORK/ckpt" 2>&1) || { echo "$out"; fail "mgtrain report failed"; }
echo "$out"
[ "$out" = "wrote $WORK/ckpt/report.svg (10 points)" ] || fail "unexpected output: $out"
svg=ckpt/report.svg
[ -s "$svg" ] || fail "no $svg"

# Well-formed enough: the XML declaration first, </svg> last, every element that opens closes,
# only the five XML entities, nothing fetched from outside.
head -1 "$svg" | grep -q '^<?xml version="1.0" encoding="UTF-8"?>$' || fail "no XML declaration"
[ "$(tail -n 1 "$svg")" = "</svg>" ] || fail "the SVG does not end with </svg>"
[ "$(grep -c '<svg xmlns="http://www.w3.org/2000/svg"' "$svg")" = 1 ] || fail "not one <svg> root"
for tag in svg g text style polyline title; do
  opens=$(grep -oE "<$tag( [^>]*[^/])?>" "$svg" | wc -l)
  closes=$(grep -oE "</$tag>" "$svg" | wc -l)
  [ "$opens" = "$closes" ] || fail "<$tag>: $opens opened, $closes closed"
done
if grep -oE '&[^;]{0,8};?' "$svg" | grep -vqE '^&(amp|lt|gt|quot|apos);$'; then fail "a bare '&' in the SVG"; fi
if grep -qE '<script|@import|xlink:href|<image' "$svg"; then fail "the SVG refers to something outside itself"; fi

for title in "Loss" "Accuracy (training batches)" "Throughput (samples/s)" "Step time per rank (ms)" \
             "Learning rate"; do
  grep -qF "class=\"title\">$title</text>" "$svg" || fail "no panel titled '$title'"
done
# One polyline per series, one point per metrics line.
points() {
  grep -o "<polyline data-series=\"$1\"[^>]*points=\"[^\"]*\"" "$svg" | sed 's/.*points="//; s/"$//' |
    tr ' ' '\n' | grep -c ,; }
for series in loss accuracy samples/s "rank 0" "rank 1" lr; do
  n=$(points "$series") || fail "no polyline for '$series'"
  [ "$n" = 10 ] || fail "polyline '$series' has $n points, expected 10"
  [ "$(grep -c "<polyline data-series=\"$series\"" "$svg")" = 1 ] || fail "more than one polyline for '$series'"
done
grep -qF 'class="legendtext">rank 1</text>' "$svg" || fail "no legend entry for rank 1"
if grep -q 'data-series="rank 2"' "$svg"; then fail "a polyline for a rank 2 that did not run"; fi

# --out, and the errors: one line naming the file and line.
"$MGTRAIN" report "$WORK/ckpt" --out "$WORK/other.svg" | grep -qF "wrote $WORK/other.svg (10 points)" ||
  fail "--out was not honoured"
cmp -s "$svg" other.svg || fail "--out wrote a different picture"
mkdir broken
{ cat ckpt/metrics.jsonl; echo '{"step":110,"loss":0.5'; } >broken/metrics.jsonl
if "$MGTRAIN" report broken 2>err.txt; then fail "a truncated line was accepted"; fi
cat err.txt
[ "$(wc -l <err.txt)" = 1 ] || fail "expected one error line"
grep -qF "mgtrain: error: [rank 0] broken/metrics.jsonl:11: expected " err.txt || fail "error does not name file:line"
if "$MGTRAIN" report "$WORK/empty-run" 2>err.txt; then fail "a missing run directory was accepted"; fi
grep -qF "mgtrain: error: [rank 0] report: run directory '$WORK/empty-run' does not exist" err.txt ||
  fail "unexpected error: $(cat err.txt)"
echo "report OK"
