#!/usr/bin/env bash
# SentencePiece tokenizers end to end: `data tokenizer` trains one on fortunes text, the same bytes
# every time; `data convert --tokenizer` writes its ids as uint16 with the model inside; the gpt
# trains on them at np=1 and np=2 with the same deterministic bits, and every later step (eval,
# generate, export) uses the tokenizer the checkpoint keeps; each bad input gets one line.
# Usage: tokenizer.sh train|bad_input
source "$(dirname "$0")/lib.sh"
require_fortunes

prepare() {  # a 1000-piece BPE model and the cookie file's 90/10 split, converted with it
  head -c 220000 "$FORTUNES/cookie" >train.txt
  tail -c +220001 "$FORTUNES/cookie" >test.txt
  "$MGTRAIN" data tokenizer --text train.txt --vocab 1000 --out tok.model >tok.log 2>&1 ||
    { cat tok.log; fail "data tokenizer"; }
  "$MGTRAIN" data convert --text train.txt --tokenizer tok.model --out train.h5 >convert.log 2>&1 &&
    "$MGTRAIN" data convert --text test.txt --tokenizer tok.model --out test.h5 >>convert.log 2>&1 ||
    { cat convert.log; fail "data convert --tokenizer"; }
}
write_gpt_config() {
  cat >run.ini <<INI
[data]
train = $WORK/train.h5
test = $WORK/test.h5
[model]
name = gpt
layers = 2
heads = 2
dim = 32
context = 32
vocab = 1000
[optimizer]
name = adam
lr = 0.002
[train]
max_steps = 12
global_batch = 16
seed = 11
log_every = 4
[checkpoint]
dir = $WORK/ckpt
INI
}
expect_error() {  # expect_error LOG PATTERN WHAT: a non-zero exit already seen; one line matching
  one_error_line "$1" | grep -qE -- "$2" || { cat "$1"; fail "$3: the error line does not say '$2'"; }
}

case $1 in
  train)
    prepare
    "$MGTRAIN" data tokenizer --text train.txt --vocab 1000 --out again.model >/dev/null 2>&1 ||
      fail "data tokenizer (again)"
    cmp tok.model again.model || fail "the same text and options gave another model"
    "$MGTRAIN" data tokenizer --text train.txt --vocab 1000 --type unigram --out uni.model >/dev/null 2>&1 ||
      fail "data tokenizer --type unigram"
    ! cmp -s tok.model uni.model || fail "--type unigram gave the BPE model"
    # The file: uint16 ids, fewer than the bytes, the model's bytes and hash inside.
    h5dump -H -d /tokens train.h5 | grep -q H5T_STD_U16LE || fail "/tokens is not uint16"
    h5dump -a /vocab_size train.h5 | grep -q "(0): 1000" || fail "vocab_size is not the tokenizer's 1000"
    h5dump -a /tokenizer train.h5 | grep -q '"sentencepiece"' || fail "no attribute tokenizer = sentencepiece"
    h5dump -a /tokenizer_sha256 train.h5 | grep -q "$(sha256sum <tok.model | cut -c1-64)" ||
      fail "tokenizer_sha256 is not the model's SHA-256"
    h5dump -d /tokenizer -b LE -o stored.model train.h5 >/dev/null
    cmp tok.model stored.model || fail "/tokenizer is not the model's bytes"
    tokens=$(sed -n 's/^wrote train.h5: \([0-9]*\) tokens (vocabulary 1000) from 220000 bytes.*/\1/p' convert.log)
    [ -n "$tokens" ] && [ "$tokens" -lt 150000 ] || { cat convert.log; fail "expected far fewer tokens than bytes"; }
    # Deterministic training at np=1 and np=2: the same parameter bits.
    write_gpt_config
    det=(--config run.ini --sync.deterministic=true)
    for np in 1 2; do
      run_np $np 120 train "${det[@]}" --checkpoint.dir="$WORK/np$np" >np$np.log 2>&1 ||
        { cat np$np.log; fail "training at np=$np"; }
    done
    [ "$(group_hash np1/step-12.h5 /params)" = "$(group_hash np2/step-12.h5 /params)" ] ||
      fail "the parameters differ between np=1 and np=2"
    h5dump -d /tokenizer -b LE -o ckpt.model np1/step-12.h5 >/dev/null
    cmp tok.model ckpt.model || fail "the checkpoint's /tokenizer is not the training file's model"
    grep -q "test loss .* bits per token), .* on [0-9]* tokens of $WORK/test.h5" np2.log || { cat np2.log; fail "no test line"; }
    "$MGTRAIN" eval --checkpoint np2/step-12.h5 --data test.h5 >eval.log 2>&1 || { cat eval.log; fail "eval"; }
    # generate needs no data file: the checkpoint's tokenizer encodes the prompt and decodes 40
    # tokens, more bytes than tokens, the same every run.
    mv train.h5 moved.h5
    gen=(generate --checkpoint np1/step-12.h5 --prompt "You will" --tokens 40 --seed 3)
    "$MGTRAIN" "${gen[@]}" >gen1.txt 2>gen.log || { cat gen.log; fail "generate"; }
    "$MGTRAIN" "${gen[@]}" >gen2.txt 2>>gen.log || { cat gen.log; fail "generate (again)"; }
    cmp gen1.txt gen2.txt || fail "generate is not reproducible"
    [ "$(stat -c %s gen1.txt)" -gt 40 ] || fail "40 tokens gave $(stat -c %s gen1.txt) bytes: not decoded by the tokenizer"
    "$MGTRAIN" "${gen[@]}" --temperature 0 --echo >greedy.txt 2>>gen.log || { cat gen.log; fail "generate --echo"; }
    [ "$(head -c 8 greedy.txt)" = "You will" ] || fail "--echo does not start with the prompt"
    "$MGTRAIN" export --checkpoint np1/step-12.h5 --out gpt.onnx >export.log 2>&1 || { cat export.log; fail "export"; }
    grep -q 'output "logits" \[N, T, 1000\]' export.log || { cat export.log; fail "export's vocabulary is not 1000"; }
    mv moved.h5 train.h5
    echo "tokenizer: $tokens tokens for 220000 bytes; np=1 and np=2 give the same bits; generate wrote $(stat -c %s gen1.txt) bytes for 40 tokens"
    ;;
  shards)
    # The training text converted in two shards (cut at a line's end: ids are encoded a line at a
    # time) trains to the bits of the one file; its checkpoint keeps the tokenizer, and a shard of
    # another tokenizer is refused naming both files.
    prepare
    split -n l/2 train.txt part.
    for p in part.aa part.ab; do
      "$MGTRAIN" data convert --text $p --tokenizer tok.model --out $p.h5 >/dev/null 2>&1 || fail "convert $p"
    done
    write_gpt_config
    det=(--config run.ini --sync.deterministic=true)
    run_np 2 120 train "${det[@]}" --checkpoint.dir="$WORK/one" >one.log 2>&1 || { cat one.log; fail "one file"; }
    run_np 2 120 train "${det[@]}" --data.train="$WORK/part.aa.h5,$WORK/part.ab.h5" --checkpoint.dir="$WORK/two" \
      >two.log 2>&1 || { cat two.log; fail "two shards"; }
    [ "$(group_hash one/step-12.h5 /params)" = "$(group_hash two/step-12.h5 /params)" ] ||
      fail "two shards of the text train to other bits than the one file"
    h5dump -d /tokenizer -b LE -o two.model two/step-12.h5 >/dev/null
    cmp tok.model two.model || fail "the shards' checkpoint does not keep their tokenizer"
    "$MGTRAIN" data convert --text part.ab --out bytes.h5 >/dev/null 2>&1 || fail "data convert (bytes)"
    set +e
    run_np 2 120 train --config run.ini --data.train="$WORK/part.aa.h5,$WORK/bytes.h5" >mixed.log 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] || fail "shards of two tokenizers were not refused"
    grep -q "part.aa.h5' and '.*bytes.h5' (shards of .*) differ: vocab_size 1000 vs 256" mixed.log || { cat mixed.log; fail "the refusal's line"; }
    ;;
  bad_input)
    prepare
    write_gpt_config
    "$MGTRAIN" data convert --text test.txt --out bytes.h5 >/dev/null 2>&1 || fail "data convert (bytes)"
    bad() {  # bad NAME PATTERN COMMAND...: exits non-zero with one line matching PATTERN
      local name=$1 pattern=$2; shift 2
      local limit=(timeout 60)
      [ "$1" != run_np ] || limit=()  # run_np has its own
      if "${limit[@]}" "$@" >"$name.log" 2>&1; then cat "$name.log"; fail "$name: accepted"; fi
      expect_error "$name.log" "$pattern" "$name"
    }
    bad missing "tokenizer file 'nope.model' does not exist" \
      "$MGTRAIN" data convert --text test.txt --tokenizer nope.model --out x.h5
    head -c 5000 tok.model >cut.model
    bad corrupt "tokenizer file 'cut.model' is not a SentencePiece model" \
      "$MGTRAIN" data convert --text test.txt --tokenizer cut.model --out x.h5
    bad not_sentencepiece "tokenizer file 'test.txt' is not a SentencePiece model" \
      "$MGTRAIN" data convert --text test.txt --tokenizer test.txt --out x.h5
    [ ! -e x.h5 ] || fail "a refused conversion left x.h5"
    bad vocab_range "--vocab 12 is out of range: expected 258 to" \
      "$MGTRAIN" data tokenizer --text test.txt --vocab 12 --out v.model
    bad vocab_word "--vocab: expected an integer from 258" "$MGTRAIN" data tokenizer --text test.txt --vocab many --out v.model
    bad vocab_text "--vocab 60000 is more than the text of 'test.txt' allows .*at most|<=" \
      "$MGTRAIN" data tokenizer --text test.txt --vocab 60000 --out v.model
    bad vocab_chars "--vocab 300 is fewer than the characters of 'train.txt' need" \
      "$MGTRAIN" data tokenizer --text train.txt --vocab 300 --out v.model
    [ ! -e v.model ] || fail "a refused training left v.model"
    bad model_vocab "token file '$WORK/train.h5' has vocab_size 1000, more than the model's vocabulary of 500" \
      run_np 1 60 train --config run.ini --model.vocab=500
    bad test_tokenizer "data.test: token file '$WORK/bytes.h5' was made by tokenizer bytes, but data.train '$WORK/train.h5' by sentencepiece" \
      run_np 1 60 train --config run.ini --data.test="$WORK/bytes.h5"
    run_np 1 60 train --config run.ini --train.max_steps=1 >one.log 2>&1 || { cat one.log; fail "one step"; }
    bad eval_tokenizer "eval: token file 'bytes.h5' was made by tokenizer bytes, but checkpoint 'ckpt/step-1.h5' by sentencepiece" \
      "$MGTRAIN" eval --checkpoint ckpt/step-1.h5 --data bytes.h5
    # A damaged /tokenizer in the token file is found before step 1.
    h5py_edit train.h5 'd = f["tokenizer"]; b = d[()]; b[100] ^= 1; d[...] = b'
    bad damaged "token file '$WORK/train.h5': dataset '/tokenizer' has CRC-32" \
      run_np 1 60 train --config run.ini --checkpoint.dir="$WORK/damaged"
    echo "tokenizer: every bad input refused with one line"
    ;;
  *) fail "unknown case $1" ;;
esac
