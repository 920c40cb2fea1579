#!/usr/bin/env bash
# Token files (data convert --text) a run, eval, inspect or convert must refuse or name rightly,
# and a checkpoint named by `latest` or its run directory. Each refusal is one line naming the file
# and what is wrong, a non-zero exit and no rank left running.
# Usage: token_checks.sh CASE
#   cut_short      the token file truncated while two ranks train on it: the run ends at the next
#                  batch with "is now N bytes, was M", as for a sample file, not trained on zeros
#   unstored       /tokens extended with nothing written (its chunks' CRCs over the zeros): refused
#                  naming the chunks it stores; 2^50 tokens declared: refused before any allocation
#   eval_streams   eval checks a token file a chunk at a time (a damaged 32 MB file is refused
#                  at the peak of a damaged one-chunk file), and its default batch of a language
#                  model's windows is small
#   misleading     a truncated token file, an lzf-compressed /tokens, model.context = 1,
#                  --text /proc/self/status, --text's dangling link and loop, --text with --csv:
#                  each named for what it is
#   control_bytes  a tokenizer attribute with an escape sequence: data inspect writes it escaped
#   latest         eval, export, generate, compare and --resume take a run's `latest` or its directory
# The files are edited with h5py (Debian: python3-h5py, from scripts/install_deps.sh).
source "$(dirname "$0")/lib.sh"
require_fortunes
case=$1
python=$(h5py_python)

write_gpt_config() {  # write_gpt_config TRAIN_FILE [key = value lines for [train]...]
  cat >run.ini <<INI
[data]
train = $1
[model]
name = gpt
layers = 1
heads = 2
dim = 16
context = 32
[optimizer]
name = adam
lr = 0.002
[train]
max_steps = 20
global_batch = 16
seed = 5
log_every = 1
progress = lines
[checkpoint]
dir = $WORK/ckpt
INI
}

# Runs mgtrain ARGS; expects one error line matching PATTERN, a non-zero exit and no checkpoint.
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1 rc=0; shift
  rm -rf ckpt
  "$MGTRAIN" "$@" >err.log 2>&1 || rc=$?
  [ $rc -ne 0 ] || { cat err.log; fail "accepted: $*"; }
  one_error_line err.log | grep -qE "$pattern" || { cat err.log; fail "'$*': expected /$pattern/"; }
  ! ls ckpt/step-*.h5 >/dev/null 2>&1 || fail "'$*' wrote a checkpoint"
}

case $case in
cut_short)
  # Four chunks of tokens, trained on until the file is cut: the run must end naming the file.
  for _ in 1 2 3 4 5 6; do cat "$FORTUNES/cookie" "$FORTUNES/computers"; done | head -c 4000000 >text.txt
  "$MGTRAIN" data convert --text text.txt --out train.h5 >/dev/null
  bytes=$(stat -c %s train.h5)
  write_gpt_config "$WORK/train.h5"
  sed -i 's/^max_steps = .*/max_steps = 1000000/' run.ini
  timeout --kill-after=10 300 mpirun -np 2 --oversubscribe "$MGTRAIN" train --config run.ini \
    --checkpoint.every_steps=0 >run.log 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -qs '^epoch [0-9]*/[0-9]* step ' run.log && break; sleep 0.1; done
  grep -q '^epoch [0-9]*/[0-9]* step ' run.log || { kill $job; cat run.log; fail "the run took no step"; }
  truncate -s $((bytes / 2)) train.h5
  rc=0
  wait $job || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { tail -5 run.log; fail "exit $rc: the run went on training on the cut file"; }
  cut="mgtrain: error: \[rank [01]\] data file '$WORK/train.h5' is now $((bytes / 2)) bytes, was $bytes when the run opened it"
  grep -q "$cut" run.log || { cat run.log; fail "no line says the token file was cut short"; }
  ! grep "mgtrain: error:" run.log | grep -vq "$cut" || { cat run.log; fail "another error line"; }
  no_ranks_left
  echo "$(grep -m1 'mgtrain: error:' run.log)"
  ;;
unstored)
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >/dev/null
  write_gpt_config "$WORK/train.h5"
  # 20M tokens declared, the first chunk stored; the CRCs of the rest are those of zeros.
  h5py_edit train.h5 '
n = 20_000_000; chunk = 1 << 20; chunks = (n + chunk - 1) // chunk
f["tokens"].resize((n,))
crc = list(f["tokens_crc32"][...]); crc[-1] = zlib.crc32(f["tokens"][(len(crc) - 1) * chunk:len(crc) * chunk].tobytes())
last = n - (chunks - 1) * chunk
crc += [zlib.crc32(bytes(chunk))] * (chunks - 1 - len(crc)) + [zlib.crc32(bytes(last))]
attrs = dict(f["tokens_crc32"].attrs); del f["tokens_crc32"]
d = f.create_dataset("tokens_crc32", data=np.array(crc, dtype="u4"))
for k, v in attrs.items(): d.attrs[k] = v'
  refusal="token file '$WORK/train.h5': dataset '/tokens' declares 20000000 rows but stores 1 of its 20 chunks"
  expect_error "$refusal" train --config run.ini
  expect_error "$refusal" data inspect "$WORK/train.h5"
  # 2^50 tokens declared, with a /tokens_crc32 of 2^30 values stored nowhere: refused at once,
  # not after allocating a checksum per declared chunk (4 GiB).
  h5py_edit train.h5 '
f["tokens"].resize((1 << 50,))
del f["tokens_crc32"]
f.create_dataset("tokens_crc32", shape=(1 << 30,), dtype="u4", chunks=(1 << 16,))'
  peak_kib=$("$python" -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open("big.log", "w"))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$MGTRAIN" train --config run.ini)
  one_error_line big.log | grep -q "token file '$WORK/train.h5': dataset '/tokens' declares 1125899906842624 rows but stores" ||
    { cat big.log; fail "2^50 tokens declared: expected the unstored chunks named"; }
  echo "2^50 tokens declared: refused at a peak RSS of $peak_kib KiB"
  [ "$peak_kib" -lt 1000000 ] || fail "refusing 2^50 declared tokens took $peak_kib KiB"
  ;;
eval_streams)
  # eval checks a token file's chunks as training does, a chunk at a time: a 32 MB file damaged
  # in its last chunk is refused at the peak memory of a one-chunk file damaged likewise, where a
  # check of the file held whole takes 32 MB more.
  head -c 24000000 /dev/urandom | base64 -w 100 >big.txt
  "$MGTRAIN" data convert --text big.txt --out big.h5 >/dev/null
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >/dev/null
  cp train.h5 small.h5
  for f in big.h5 small.h5; do h5py_edit $f 'f["tokens_crc32"][-1] ^= 1'; done
  write_gpt_config "$WORK/train.h5"
  "$MGTRAIN" train --config run.ini --train.max_steps=2 >train.log 2>&1 || { cat train.log; fail "training"; }
  eval_peak_kib() {  # eval_peak_kib ARGS...: eval's peak RSS, its output and exit status in eval.log
    "$python" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=open("eval.log", "w"), stderr=subprocess.STDOUT)
open("eval.log", "a").write("exit %d\n" % r.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$MGTRAIN" eval --checkpoint ckpt/step-2.h5 "$@"
  }
  small_kib=$(eval_peak_kib --data small.h5)
  grep -q "small.h5': tokens .* the file is damaged" eval.log || { cat eval.log; fail "small.h5's damage not named"; }
  big_kib=$(eval_peak_kib --data big.h5)
  grep -q "big.h5': tokens .* the file is damaged" eval.log || { cat eval.log; fail "big.h5's damage not named"; }
  file_kib=$(($(stat -c %s big.h5) / 1024))
  echo "eval refusing a damaged token file: peak RSS $small_kib KiB (one chunk), $big_kib KiB ($file_kib KiB)"
  [ $((big_kib - small_kib)) -lt $((file_kib / 2)) ] ||
    fail "eval held $((big_kib - small_kib)) KiB more for a $file_kib KiB token file: it does not stream"
  # A language model's default --batch is a few windows, not 1000 (150 MB more for this tiny model).
  default_kib=$(eval_peak_kib --data train.h5)
  grep -q "^exit 0" eval.log && grep -q "nats/token .* tokens $((($(stat -c %s "$FORTUNES/cookie") - 1) / 32 * 32)) " eval.log ||
    { cat eval.log; fail "eval on a token file"; }
  grep -c "" eval.log | grep -qx 2 || { cat eval.log; fail "eval said more than its line"; }
  batch16_kib=$(eval_peak_kib --data train.h5 --batch 16)
  grep -q "^exit 0" eval.log || { cat eval.log; fail "eval --batch 16"; }
  echo "eval's peak RSS: $default_kib KiB with the default --batch, $batch16_kib KiB with --batch 16"
  [ $((default_kib - batch16_kib)) -lt 32768 ] ||
    fail "eval's default --batch took $((default_kib - batch16_kib)) KiB more than --batch 16"
  ;;
misleading)
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >/dev/null
  write_gpt_config "$WORK/train.h5"
  # Truncated: said so, not "not a token file".
  head -c 100000 train.h5 >cut.h5
  expect_error "token file 'cut.h5' could not be opened: it is truncated \(100000 bytes, its HDF5 superblock says [0-9]+" \
    train --config run.ini --data.train=cut.h5
  # lzf: the filter named, not HDF5's plugin search.
  "$python" - <<'PY'
import h5py, numpy as np
with h5py.File("train.h5", "r") as src, h5py.File("lzf.h5", "w") as f:
    f.create_dataset("tokens", data=src["tokens"][...], chunks=(1 << 20,), maxshape=(None,), compression="lzf")
    f.copy(src["tokens_crc32"], "tokens_crc32")
    for k, v in src.attrs.items(): f.attrs[k] = v
PY
  expect_error "token file 'lzf.h5': dataset '/tokens' is compressed with the HDF5 filter 'lzf' \(filter id 32000\), which this HDF5 does not have" \
    train --config run.ini --data.train=lzf.h5
  # model.context = 1 is a language model of one token a window.
  "$MGTRAIN" train --config run.ini --model.context=1 --train.max_steps=2 >context1.log 2>&1 ||
    { cat context1.log; fail "model.context = 1 refused"; }
  # /proc files have size 0 in stat and content when read.
  "$MGTRAIN" data convert --text /proc/self/status --out status.h5 >status.log 2>&1 ||
    { cat status.log; fail "--text /proc/self/status"; }
  grep -q "^wrote status.h5: [1-9][0-9]* byte tokens from 1 file" status.log || { cat status.log; fail "status.h5's line"; }
  # A dangling link and a link loop: --text says what --csv says.
  ln -s nowhere.txt dangling.txt
  ln -s loop.txt loop.txt
  for link in dangling.txt loop.txt; do
    "$MGTRAIN" data convert --csv $link --shape 4 --out out.h5 >csv.log 2>&1 && fail "--csv $link accepted"
    csv_says=$(one_error_line csv.log | sed "s/.*CSV file '$link' //")
    "$MGTRAIN" data convert --text $link --out out.h5 >err.log 2>&1 && fail "--text $link accepted"
    one_error_line err.log | grep -qF "text file '$link' $csv_says" || { cat csv.log err.log; fail "--text $link: not what --csv says"; }
  done
  # Two inputs: refused, not one silently dropped.
  printf 'a,b\n' >b.csv
  expect_error "data convert: give one input, got --text and --csv" data convert --text "$FORTUNES/cookie" --csv b.csv \
    --shape 1 --out out.h5
  [ ! -e out.h5 ] || fail "--text with --csv wrote out.h5"
  ;;
control_bytes)
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >/dev/null
  h5py_edit train.h5 'f.attrs["tokenizer"] = np.bytes_(b"bytes\x1b[2J\x07")'
  "$MGTRAIN" data inspect train.h5 >inspect.txt 2>&1 || { cat inspect.txt; fail "data inspect"; }
  ! grep -q $'\x1b' inspect.txt || fail "data inspect wrote an escape byte from the file"
  grep -qF 'tokenizer: bytes\x1b[2J\x07' inspect.txt || { cat inspect.txt; fail "the tokenizer is not shown escaped"; }
  ;;
latest)
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" --out train.h5 >/dev/null
  write_gpt_config "$WORK/train.h5"
  "$MGTRAIN" train --config run.ini --train.max_steps=4 >train.log 2>&1 || { cat train.log; fail "training"; }
  [ "$(cat ckpt/latest)" = step-4.h5 ] || fail "latest does not name step-4.h5"
  for spec in ckpt/latest ckpt "$WORK/ckpt/" ; do
    "$MGTRAIN" eval --checkpoint "$spec" --data train.h5 >eval.log 2>&1 || { cat eval.log; fail "eval --checkpoint $spec"; }
    grep -q "(ckpt/step-4.h5 on\|($WORK/ckpt/step-4.h5 on" eval.log || { cat eval.log; fail "eval names no step-4.h5"; }
    "$MGTRAIN" generate --checkpoint "$spec" --prompt "You " --tokens 5 >gen.txt 2>gen.log ||
      { cat gen.log; fail "generate --checkpoint $spec"; }
    "$MGTRAIN" export --checkpoint "$spec" --out model.onnx >export.log 2>&1 || { cat export.log; fail "export --checkpoint $spec"; }
    "$MGTRAIN" compare "$spec" ckpt/step-4.h5 >compare.log 2>&1 || { cat compare.log; fail "compare $spec step-4.h5"; }
  done
  "$MGTRAIN" train --config run.ini --train.max_steps=6 --resume ckpt/latest >resume.log 2>&1 ||
    { cat resume.log; fail "--resume ckpt/latest"; }
  [ -f ckpt/step-6.h5 ] || fail "--resume ckpt/latest wrote no step-6.h5"
  # A latest naming nothing: said so.
  mkdir gone && echo step-99.h5 >gone/latest
  expect_error "'gone/latest' names 'step-99.h5', but 'gone/step-99.h5' does not exist" \
    eval --checkpoint gone/latest --data train.h5
  expect_error "'gone/latest' names 'step-99.h5', but 'gone/step-99.h5' does not exist" \
    generate --checkpoint gone --prompt "You " --tokens 5
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
