#!/usr/bin/env bash
# A data set in several files (data.train = a comma-separated list or glob patterns): a corpus
# converted as one token file and as 3 shards trains to the same parameter bits in deterministic
# mode at np=1, 2 and 4 (windows cross the shards' ends), and so do Fashion-MNIST rows written as
# one file and as 3 pieces at np=1 and 2; the same list resumes at another world size with the
# straight run's bits; and a pattern matching nothing, a file named twice, an empty shard and
# shards that differ (vocabulary, sample type or shape, kind) are each one error line before step 1.
# Usage: shards.sh tokens|samples|resume|refused_tokens|refused_samples
source "$(dirname "$0")/lib.sh"

# The corpus as one file, and as 3 pieces of uneven sizes (part-1.h5 .. part-3.h5).
token_corpus() {
  require_fortunes
  cat "$FORTUNES/cookie" "$FORTUNES/computers" >all.txt
  local size
  size=$(stat -c %s all.txt)
  head -c 100001 all.txt >p1.txt
  head -c $((100001 + size / 2)) all.txt | tail -c +100002 >p2.txt
  tail -c +$((100002 + size / 2)) all.txt >p3.txt
  cat p1.txt p2.txt p3.txt | cmp -s - all.txt || fail "the pieces do not make up the corpus"
  for name in all p1 p2 p3; do
    "$MGTRAIN" data convert --text $name.txt --out ${name/p/part-}.h5 >>convert.log 2>&1 ||
      { cat convert.log; fail "data convert --text $name.txt"; }
  done
  "$MGTRAIN" data convert --text "$FORTUNES/wisdom" --out test.h5 >>convert.log 2>&1 || fail "convert test.h5"
  cat >run.ini <<INI
[data]
train = $WORK/part-*.h5
test = $WORK/test.h5
[model]
name = gpt
layers = 2
heads = 2
dim = 32
context = 32
[optimizer]
name = adam
lr = 0.002
[train]
max_steps = 12
global_batch = 16
seed = 11
log_every = 4
[sync]
deterministic = true
[checkpoint]
dir = $WORK/ckpt
every_steps = 0
INI
}

# The first 3000 rows of Fashion-MNIST as whole.h5 and as piece-0.h5 .. piece-2.h5 (1000, 700
# and 1300 rows), attributes and row checksums copied, in chunks of whole rows. 30 steps of 128
# cross the end of the first epoch (23 steps).
sample_pieces() {
  "$(h5py_python)" - "$DATA_DIR/train.h5" <<'PY'
import sys, h5py
sizes = [1000, 700, 1300]
with h5py.File(sys.argv[1], "r") as f:
    def write(path, lo, hi):
        with h5py.File(path, "w") as g:
            for name, value in f.attrs.items():
                g.attrs[name] = value
            for key in f:
                d = f[key]
                h = g.create_dataset(key, data=d[lo:hi], chunks=(min(64, hi - lo),) + d.shape[1:])
                for name, value in d.attrs.items():
                    h.attrs[name] = value
    write("whole.h5", 0, sum(sizes))
    lo = 0
    for k, size in enumerate(sizes):
        write(f"piece-{k}.h5", lo, lo + size)
        lo += size
PY
  write_config run.ini "[data]" "train = $WORK/piece-*.h5" "test =" "[sync]" "deterministic = true" \
    "[train]" "epochs = 2" "max_steps = 30" "[checkpoint]" "every_steps = 0"
}

train() {  # train NAME NP OVERRIDES...: trains, leaves NAME.log and NAME/
  local name=$1 np=$2; shift 2
  run_np "$np" 300 train --config run.ini --checkpoint.dir="$WORK/$name" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "run $name"; }
}
params() { group_hash "$WORK/$1/step-$2.h5" /params; }

expect_error() {  # expect_error NAME PATTERN OVERRIDES...: one error line matching PATTERN, no checkpoint
  local name=$1 pattern=$2; shift 2
  set +e
  run_np 2 120 train --config run.ini --checkpoint.dir="$WORK/$name" "$@" >"$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 0 ] || { cat "$name.log"; fail "$name: exit status 0"; }
  one_error_line "$name.log" | grep -qE -- "$pattern" || { cat "$name.log"; fail "$name: no line matching '$pattern'"; }
  [ ! -e "$WORK/$name/step-1.h5" ] || fail "$name: a checkpoint was written"
  echo "$name: $(grep "mgtrain: error:" "$name.log")"
}

case $1 in
  tokens)
    token_corpus
    train whole 1 --data.train="$WORK/all.h5"
    ref=$(params whole 12)
    for np in 1 2 4; do
      train shards$np $np
      [ "$(params shards$np 12)" = "$ref" ] || fail "3 shards at np=$np: parameters differ from the one file's"
    done
    grep -q "test loss" shards4.log || { cat shards4.log; fail "no test line"; }
    # The test line names the data set; its figures are those of the one file.
    [ "$(grep -o 'test loss [^,]*' shards2.log)" = "$(grep -o 'test loss [^,]*' whole.log)" ] ||
      fail "the test loss differs: $(grep 'test loss' shards2.log whole.log)"
    # eval --data takes the list too, reading windows across the shards' ends.
    "$MGTRAIN" eval --checkpoint shards2/step-12.h5 --data "$WORK/part-*.h5" --json >eval_shards.json ||
      fail "eval over the shards"
    "$MGTRAIN" eval --checkpoint shards2/step-12.h5 --data "$WORK/all.h5" --json >eval_whole.json || fail "eval"
    [ "$(json_field loss <eval_shards.json)" = "$(json_field loss <eval_whole.json)" ] ||
      fail "eval over the shards differs: $(cat eval_shards.json eval_whole.json)"
    # The order of the shards is the corpus's order: another order trains on another text.
    train reordered 2 --data.train="$WORK/part-3.h5,$WORK/part-1.h5,$WORK/part-2.h5"
    [ "$(params reordered 12)" != "$ref" ] || fail "the shards in another order gave the same bits: the test cannot tell"
    echo "tokens: one file and 3 shards give the same parameters at np=1, 2 and 4; another order does not"
    ;;
  samples)
    sample_pieces
    train whole 1 --data.train="$WORK/whole.h5" --data.test="$WORK/whole.h5"
    ref=$(params whole 30)
    train pieces1 1 --data.test="$WORK/piece-*.h5"
    train pieces2 2 --data.train="$WORK/piece-0.h5, $WORK/piece-1.h5,$WORK/piece-2.h5" --data.test="$WORK/piece-*.h5"
    for run in pieces1 pieces2; do
      [ "$(params $run 30)" = "$ref" ] || fail "3 pieces ($run): parameters differ from the one file's"
      [ "$(grep -o 'test accuracy [^,]*' $run.log)" = "$(grep -o 'test accuracy [^,]*' whole.log)" ] ||
        fail "$run: the test accuracy differs: $(grep 'test accuracy' $run.log whole.log)"
    done
    train reordered 2 --data.train="$WORK/piece-2.h5,$WORK/piece-0.h5,$WORK/piece-1.h5"
    [ "$(params reordered 30)" != "$ref" ] || fail "the pieces in another order gave the same bits: the test cannot tell"
    echo "samples: one file and 3 pieces give the same parameters and test accuracy at np=1 and 2"
    ;;
  resume)
    token_corpus
    train straight 2
    train moved 2 --train.max_steps=6
    run_np 4 300 train --config run.ini --checkpoint.dir="$WORK/moved" --resume latest >resumed.log 2>&1 ||
      { cat resumed.log; fail "resume at np=4"; }
    grep -q "resumed from step 6" resumed.log || { cat resumed.log; fail "did not resume from step 6"; }
    # The checkpoint keeps the list as given.
    h5dump -a /config "$WORK/moved/step-6.h5" | grep -qF "train = $WORK/part-*.h5" ||
      fail "the checkpoint does not record data.train as given"
    [ "$(params moved 12)" = "$(params straight 12)" ] || fail "6 steps at np=2 + 6 at np=4 differ from 12 straight"
    echo "resume: 3 shards, 6 steps at np=2 then 6 at np=4 give the straight run's parameters"
    ;;
  refused_tokens)
    token_corpus
    expect_error nomatch "config key 'data.train' \(command line\): data files '.*/nope-\*.h5': the pattern .* matches no file" \
      --data.train="$WORK/nope-*.h5"
    expect_error twice "config key 'data.train' \(command line\): data files .* name file '.*part-1.h5' twice" \
      --data.train="$WORK/part-1.h5,$WORK/part-*.h5"
    expect_error test_twice "config key 'data.test' \(command line\): .*twice" --data.test="$WORK/test.h5,$WORK/./test.h5"
    expect_error empty_entry "data files .*: an entry is empty" --data.train="$WORK/part-1.h5,,$WORK/part-2.h5"
    cp part-2.h5 vocab.h5
    h5py_edit vocab.h5 'f.attrs["vocab_size"] = np.int64(200)'
    expect_error vocab "data files '.*part-1.h5' and '.*vocab.h5' \(shards of .*\) differ: vocab_size 256 vs 200" \
      --data.train="$WORK/part-1.h5,$WORK/vocab.h5"
    cp part-2.h5 empty.h5
    h5py_edit empty.h5 'f["tokens"].resize((0,))'
    expect_error empty_shard "token file '.*empty.h5': dataset '/tokens' is empty" --data.train="$WORK/part-1.h5,$WORK/empty.h5"
    expect_error kinds "data files '.*part-1.h5' and '.*/train.h5' .* differ: the first is a token file" \
      --data.train="$WORK/part-1.h5,$DATA_DIR/train.h5"
    cp part-3.h5 damaged.h5
    h5py_edit damaged.h5 'f["tokens"][5] = (int(f["tokens"][5]) + 1) % 256'
    expect_error damaged "token file '.*damaged.h5': tokens 0\.\..* have CRC-32" --data.train="$WORK/part-1.h5,$WORK/damaged.h5"
    ;;
  refused_samples)
    sample_pieces
    expect_error nomatch "config key 'data.test' \(command line\): .*matches no file" --data.test="$WORK/nope-?.h5"
    "$(h5py_python)" - <<'PY'
import h5py, numpy as np
with h5py.File("piece-1.h5", "r") as f, h5py.File("float.h5", "w") as g, h5py.File("flat.h5", "w") as h, \
     h5py.File("empty.h5", "w") as e:
    for out, x in ((g, f["x"][:].astype(np.float32) / 255), (h, f["x"][:].reshape(len(f["x"]), -1)),
                   (e, f["x"][:0])):
        out.attrs["num_classes"] = f.attrs["num_classes"]
        out.create_dataset("x", data=x, maxshape=(None,) + x.shape[1:], chunks=(16,) + x.shape[1:])
        out.create_dataset("y", data=f["y"][:len(x)])
PY
    expect_error dtype "data files '.*piece-0.h5' and '.*float.h5' \(shards of .*\) differ: sample type uint8 vs float32" \
      --data.train="$WORK/piece-0.h5,$WORK/float.h5"
    expect_error shape "differ: sample shape \[1, 28, 28\] vs \[784\]" --data.train="$WORK/piece-0.h5,$WORK/flat.h5"
    expect_error empty_shard "data file '.*empty.h5'.*" --data.train="$WORK/piece-0.h5,$WORK/empty.h5"
    expect_error twice "name file '.*piece-0.h5' twice" --data.train="$WORK/piece-*.h5,$WORK/piece-0.h5"
    ;;
  *) fail "unknown case $1" ;;
esac
