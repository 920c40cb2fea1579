# Shared by the language models' tests (gpt.sh, bert.sh): the fortunes corpus converted to byte
# tokens, a small config of the model named, and the loss checks on a run's metrics file.
require_fortunes

convert_corpus() {
  "$MGTRAIN" data convert --text "$FORTUNES/cookie" "$FORTUNES/computers" --out train.h5 >convert.log 2>&1 ||
    { cat convert.log; fail "data convert --text"; }
  "$MGTRAIN" data convert --text "$FORTUNES/wisdom" --out test.h5 >>convert.log 2>&1 ||
    { cat convert.log; fail "data convert --text (test)"; }
}
write_text_config() {  # write_text_config MODEL: 2 layers, 2 heads, dim 32, context 32, 40 steps
  cat >run.ini <<INI
[data]
train = $WORK/train.h5
test = $WORK/test.h5
[model]
name = $1
layers = 2
heads = 2
dim = 32
context = 32
[optimizer]
name = adam
lr = 0.002
[train]
max_steps = 40
global_batch = 16
seed = 11
log_every = 10
[checkpoint]
dir = $WORK/ckpt
INI
}
losses() { sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$1"; }
params_hash() { group_hash "$1" /params; }
# The first logged loss against the last: the run must have lowered it by 15%. LOSS names it in
# the messages (a masked language model's is the masked-token loss).
loss_fell() {  # loss_fell DIR WHAT [LOSS]
  local first last name=${3:-loss}
  first=$(losses "$1/metrics.jsonl" | head -1)
  last=$(losses "$1/metrics.jsonl" | tail -1)
  echo "$2: $name $first -> $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.85 * a) }' || fail "$2: the $name did not fall"
}
