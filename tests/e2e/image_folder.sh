#!/usr/bin/env bash
# `mgtrain data convert --image-folder` on a real folder of PNG and JPEG files (3 classes x 20
# colour images of 40x30, a grey one, and bad ones: a corrupt JPEG, a truncated PNG, a CMYK JPEG),
# then inspect, train and eval on the result. Usage: image_folder.sh convert|train
#   convert  --bad-images error stops at the first bad image (sorted order) with one line naming
#            it and leaves no output; skip names every bad image and writes the rest; the same
#            folder gives the same bytes; inspect shows [3, 32, 32] and the per-channel moments
#   train    the converted folder trains the cnn model at np=2 for a few steps, and evaluates
source "$(dirname "$0")/lib.sh"
: "${MAKE_TEST_IMAGE:?}"
case=$1

images=$WORK/images
for class in cat dog bird; do
  mkdir -p "$images/$class"
  for i in $(seq 10 29); do
    seed=$(( ${#class} * 37 + i ))
    if [ $((i % 2)) = 0 ]; then ext=png; else ext=jpg; fi
    "$MAKE_TEST_IMAGE" "$images/$class/$i.$ext" 40 30 rgb "$seed"
  done
done
"$MAKE_TEST_IMAGE" "$images/dog/grey.png" 30 40 grey 3   # grey in a colour folder: made RGB
echo "not an image" >"$images/cat/notes.txt"               # ignored by its name
bad_images() {
  printf 'this is no JPEG' >"$images/bird/00-corrupt.jpg"
  "$MAKE_TEST_IMAGE" "$WORK/whole.png" 40 30 rgb 9
  head -c $(( $(stat -c %s "$WORK/whole.png") / 2 )) "$WORK/whole.png" >"$images/cat/00-truncated.png"
  "$MAKE_TEST_IMAGE" "$images/dog/00-cmyk.jpg" 40 30 cmyk 5
}

convert() {  # convert OUT [options...]; --size 32 unless given
  local out=$1; shift
  case " $* " in *" --size "*) ;; *) set -- --size 32 "$@" ;; esac
  timeout 120 "$MGTRAIN" data convert --image-folder "$images" --out "$out" "$@"
}

case $case in
convert)
  bad_images
  # error: the first bad image in label order (bird < cat < dog), one line, exit 1, no file left.
  if convert refused.h5 >out.log 2>&1; then cat out.log; fail "a folder with bad images was converted"; fi
  line=$(one_error_line out.log)
  expected="mgtrain: error: [rank 0] image folder '$images': image '$images/bird/00-corrupt.jpg' is neither PNG nor JPEG (its first bytes are 0x74 0x68 0x69) (--bad-images skip leaves bad images out)"
  [ "$line" = "$expected" ] || fail "got: $line"
  [ -z "$(ls -A | grep refused)" ] || fail "a refused conversion left $(ls | grep refused)"

  # skip: a warning naming each bad image and why, a count, then the rest written.
  convert skipped.h5 --bad-images skip >out.log 2>err.log || { cat out.log err.log; fail "skip mode failed"; }
  cat out.log err.log
  grep -qx "mgtrain: warning: image '$images/bird/00-corrupt.jpg' is neither PNG nor JPEG .*; skipped" err.log ||
    fail "no warning for the corrupt JPEG"
  grep -qx "mgtrain: warning: image '$images/cat/00-truncated.png' is a corrupt or truncated PNG: .*; skipped" err.log ||
    fail "no warning for the truncated PNG"
  grep -qx "mgtrain: warning: image '$images/dog/00-cmyk.jpg' is a CMYK JPEG, which is not supported (convert it to RGB or greyscale); skipped" err.log ||
    fail "no warning for the CMYK JPEG"
  grep -qx "mgtrain: warning: skipped 3 bad images (named above); wrote 61" err.log || fail "no count of skipped images"
  grep -qx "wrote skipped.h5: 61 images of 3x32x32, 3 classes (1 file ignored: not .png, .jpg or .jpeg)" out.log ||
    fail "unexpected summary"

  # Deterministic: the same folder, the same bytes (a second later: HDF5 would store the time).
  sleep 1.1
  convert again.h5 --bad-images skip >/dev/null 2>&1
  cmp skipped.h5 again.h5 || fail "two conversions of the same folder differ"

  "$MGTRAIN" data inspect skipped.h5 >inspect.log
  cat inspect.log
  grep -q "^samples: *61$" inspect.log || fail "inspect: samples"
  grep -q "^sample shape: *\[3, 32, 32\]" inspect.log || fail "inspect: sample shape"
  grep -q "^normalisation: per channel, mean \[[0-9.e-]*, [0-9.e-]*, [0-9.e-]*\], std \[" inspect.log ||
    fail "inspect: per-channel normalisation"
  grep -q "bird *20 " inspect.log && grep -q "cat *20 " inspect.log && grep -q "dog *21 " inspect.log ||
    fail "inspect: class counts"

  # --channels 1: colour made grey.
  convert grey.h5 --bad-images skip --channels 1 --size 16x24 >/dev/null 2>&1 || fail "--channels 1 --size 16x24 failed"
  "$MGTRAIN" data inspect grey.h5 | grep -q "^sample shape: *\[1, 16, 24\]" || fail "--channels 1 --size 16x24"

  # Options out of range: one line each, naming the option and what it takes.
  for bad in "--size 3x" "--size 0" "--channels 2" "--bad-images maybe"; do
    # shellcheck disable=SC2086
    if convert opts.h5 $bad >out.log 2>&1; then fail "$bad was accepted"; fi
    one_error_line out.log
  done
  grep -q "expected a size like 32 or 32x48 (height x width), got '3x'" out.log ||
    grep -q "bad-images must be error or skip, got 'maybe'" out.log || fail "unexpected option error"
  ;;
train)
  convert train.h5 >/dev/null
  write_config run.ini "[data]" "train = $WORK/train.h5" "test = $WORK/train.h5" \
    "[model]" "name = cnn" "input_shape = 3,32,32" "channels = 4,8" "hidden = 16" "classes = 3" \
    "[train]" "global_batch = 8" "max_steps = 4" "log_every = 2" "progress = lines"
  run_np 2 240 train --config run.ini --json >train.log 2>&1 || { cat train.log; fail "training on the folder failed"; }
  cat train.log
  grep -q '"steps":4' train.log || fail "expected 4 steps"
  timeout 120 "$MGTRAIN" eval --checkpoint "$WORK/ckpt/step-4.h5" --data train.h5 >eval.log 2>&1 ||
    { cat eval.log; fail "eval failed"; }
  grep -q "samples 61" eval.log || { cat eval.log; fail "eval did not see the 61 images"; }
  ;;
*) fail "unknown case $case" ;;
esac
echo PASS
