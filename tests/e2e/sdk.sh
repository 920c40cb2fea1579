#!/usr/bin/env bash
# The installable SDK, end to end: `cmake --install` the build into a prefix, build the
# out-of-tree plugin in examples/plugin against it (find_package(mgtrain) +
# mgtrain_add_plugin) and a program that checks a layer's gradients with the installed
# mgtrain/gradient_check.hpp, check that the installed launcher lists it next to the installed built-in
# plugins (from the prefix, not the build tree), then train with it at np=2: the run must end
# with a checkpoint and the loss must go down.
source "$(dirname "$0")/lib.sh"
unset MGTRAIN_PLUGIN_PATH

SRC=$(cd "$EXAMPLES/.." && pwd)
BUILD=$(cd "$(dirname "$MGTRAIN")/.." && pwd)   # <build>/bin/mgtrain
PREFIX=$WORK/prefix
PLUGIN_BUILD=$WORK/plugin-build
PLUGIN_DIR=$PLUGIN_BUILD/plugins
[[ -f $BUILD/CMakeCache.txt ]] || fail "no CMake build directory above $MGTRAIN"

# 1. Install.
cmake --install "$BUILD" --prefix "$PREFIX" >install.log 2>&1 || { cat install.log; fail "cmake --install $BUILD"; }
for f in bin/mgtrain lib/libmgtrain.so include/mgtrain/plugin.hpp include/mgtrain/version.hpp \
         include/mgtrain/gradient_check.hpp share/mgtrain/examples/plugin/rope_gradients.cpp \
         lib/cmake/mgtrain/mgtrainConfig.cmake lib/cmake/mgtrain/mgtrainConfigVersion.cmake \
         lib/cmake/mgtrain/mgtrainTargets.cmake lib/cmake/mgtrain/MgtrainPlugin.cmake \
         lib/mgtrain/plugins/libmgtrain-model-mlp.so lib/mgtrain/plugins/libmgtrain-optimizer-sgd.so \
         lib/mgtrain/plugins/libmgtrain-sync-allreduce.so share/mgtrain/examples/plugin/signsgd.cpp \
         share/mgtrain/examples/plugin/CMakeLists.txt share/mgtrain/examples/builtin/models/mlp/mlp.cpp \
         share/mgtrain/examples/builtin/models/cnn/cnn.cpp share/mgtrain/examples/builtin/sync/allreduce/allreduce.cpp \
         share/mgtrain/examples/builtin/sync/grad_accum/grad_accum.cpp; do
  [[ -e $PREFIX/$f ]] || fail "not installed: $PREFIX/$f"
done
! ls "$PREFIX"/lib/mgtrain/plugins | grep -E 'badabi|wrongkind|nosymbol' || fail "test plugins were installed"
# Internal headers stay out of the SDK: the data reader's fiber is no plugin's business.
[[ ! -e $PREFIX/include/mgtrain/idle_core.hpp ]] || fail "an internal header was installed: include/mgtrain/idle_core.hpp"
# The installed launcher runs on the installed library (RPATH $ORIGIN/../lib), not the build tree's.
lib=$(readlink -f "$(ldd "$PREFIX/bin/mgtrain" | awk '/libmgtrain\.so/ {print $3}')")
[[ $lib == "$PREFIX/lib/"* ]] || { ldd "$PREFIX/bin/mgtrain"; fail "installed launcher loads libmgtrain from '$lib'"; }

# 2. The example plugin, out of tree, against the installed package only.
cmake -S "$SRC/examples/plugin" -B "$PLUGIN_BUILD" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_BUILD_TYPE=Release >configure.log 2>&1 || { cat configure.log; fail "configure examples/plugin"; }
grep -q "mgtrain_DIR:PATH=$PREFIX/lib/cmake/mgtrain" "$PLUGIN_BUILD/CMakeCache.txt" ||
  { grep mgtrain_DIR "$PLUGIN_BUILD/CMakeCache.txt"; fail "examples/plugin did not use the installed package"; }
cmake --build "$PLUGIN_BUILD" -j2 >build.log 2>&1 || { cat build.log; fail "build examples/plugin"; }
so=$PLUGIN_DIR/libmgtrain-optimizer-signsgd.so
[[ -f $so ]] || fail "no $so"
# Plugins built out of tree look up no library in the current directory either (runpath.sh).
check_search_paths "$PLUGIN_DIR"
# Only the descriptor is exported from the plugin.
nm -D --defined-only "$so" | grep -q ' mgtrain_plugin_descriptor$' || fail "$so does not export the descriptor"
# A program against the installed headers and library alone: the gradient checker
# (mgtrain/gradient_check.hpp) on the example's RoPE layer passes, and fails on a layer whose
# backward is wrong on purpose (a check that cannot fail proves nothing).
"$PLUGIN_BUILD/rope_gradients" >gradients.log 2>&1 || { cat gradients.log; fail "rope_gradients"; }
grep -q "^gradients of layer 'rope1': all [0-9]* elements checked within the tolerance" gradients.log ||
  { cat gradients.log; fail "rope_gradients did not report its check"; }
mkdir -p wrong-src
sed 's/ops.binary(mgt::BinaryOp::multiply, grad_out.data(), cos_, scratch_, n);/ops.zero(scratch_, n * sizeof(float));/' \
  "$SRC/examples/plugin/rope.hpp" >wrong-src/rope.hpp
! cmp -s "$SRC/examples/plugin/rope.hpp" wrong-src/rope.hpp || fail "could not make a wrong rope backward"
cp "$SRC/examples/plugin/rope_gradients.cpp" wrong-src/
cat >wrong-src/CMakeLists.txt <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(wrong_gradients LANGUAGES CXX)
find_package(mgtrain 1.0 REQUIRED)
add_executable(rope_gradients rope_gradients.cpp)
target_link_libraries(rope_gradients PRIVATE mgtrain::sdk)
CMAKE
{ cmake -S wrong-src -B wrong-build -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build wrong-build; } >wrong-build.log 2>&1 || { cat wrong-build.log; fail "build the wrong rope check"; }
wrong-build/rope_gradients >wrong.log 2>&1 && { cat wrong.log; fail "the gradient check passed a wrong backward"; }
grep -q "^gradients of layer 'rope1': [0-9]* of [0-9]* elements outside the tolerance; worst: input element" wrong.log ||
  { cat wrong.log; fail "the gradient check did not name the wrong input gradient"; }

# 3. The installed launcher lists the new plugin and the installed built-in ones.
"$PREFIX/bin/mgtrain" plugins --plugin-path "$PLUGIN_DIR" >plugins.txt 2>&1 || { cat plugins.txt; fail "mgtrain plugins"; }
# Search order: --plugin-path, then the install's lib/mgtrain/plugins, and nothing of the build
# tree it was installed from. The loader prints the install's directory as found from libmgtrain's
# own path (<prefix>/bin/../lib/...), so paths are compared after resolving them.
canon() { realpath -m "$1"; }
mapfile -t dirs < <(sed -n '/^search path:/,/^KIND/p' plugins.txt | sed -n 's/^  //p')
[[ ${#dirs[@]} -ge 2 && $(canon "${dirs[0]}") == "$(canon "$PLUGIN_DIR")" ]] ||
  { cat plugins.txt; fail "--plugin-path is not searched first"; }
[[ $(canon "${dirs[1]}") == "$(canon "$PREFIX/lib/mgtrain/plugins")" ]] ||
  { cat plugins.txt; fail "the install's lib/mgtrain/plugins is not searched second"; }
for d in "${dirs[@]}"; do
  [[ $(canon "$d") != "$(canon "$BUILD/plugins")" ]] ||
    { cat plugins.txt; fail "the installed mgtrain searches the build tree: $d"; }
done
line=$(grep -E '^optimizer +signsgd ' plugins.txt) || { cat plugins.txt; fail "the new plugin is not listed"; }
[[ $(awk '{print $3}' <<<"$line") == 1.0.0 &&
   $(canon "$(awk '{print $4}' <<<"$line")") == "$(canon "$so")" ]] ||
  { cat plugins.txt; fail "the new plugin is not listed from $PLUGIN_DIR: $line"; }
for kn in "model mlp" "model cnn" "optimizer sgd" "optimizer adam" "sync allreduce" "sync grad_accum" "sync param_server" "sync zero"; do
  read -r kind name <<<"$kn"
  line=$(grep -E "^$kind +$name " plugins.txt) || { cat plugins.txt; fail "built-in $kind '$name' not listed"; }
  [[ $(canon "$(awk '{print $4}' <<<"$line")") == "$(canon "$PREFIX/lib/mgtrain/plugins/libmgtrain-$kind-$name.so")" ]] ||
    { cat plugins.txt; fail "built-in $kind '$name' not taken from the prefix: $line"; }
done
# Every usable plugin comes from the plugin dir or the prefix, and nothing is refused (not even as
# shadowed: the build tree's copies are not looked at).
while read -r path; do
  path=$(canon "$path")
  [[ $path == "$(canon "$PLUGIN_DIR")/"* || $path == "$(canon "$PREFIX")/"* ]] ||
    { cat plugins.txt; fail "plugin used from outside the install: $path"; }
done < <(awk '/^(model|optimizer|sync|schedule) / {print $4}' plugins.txt)
! grep '^refused:' plugins.txt || { cat plugins.txt; fail "a plugin was refused"; }
"$PREFIX/bin/mgtrain" plugins >plugins-plain.txt 2>&1 || { cat plugins-plain.txt; fail "mgtrain plugins"; }
! grep -e '^refused:' -e "$BUILD/plugins" plugins-plain.txt || { cat plugins-plain.txt; fail "the installed mgtrain looked at the build tree"; }

# 4. A short training run with the installed launcher and the new optimizer, np=2.
write_config run.ini
steps=50
timeout --kill-after=10 300 mpirun -np 2 --oversubscribe "$PREFIX/bin/mgtrain" train --config run.ini \
  --plugin-path "$PLUGIN_DIR" --optimizer.name=signsgd --optimizer.lr=0.001 --optimizer.momentum=0.9 \
  --train.max_steps=$steps --train.log_every=10 --json >train.log 2>&1 || { cat train.log; fail "training with signsgd"; }
grep -q "^name = signsgd" train.log || { cat train.log; fail "the resolved config does not name signsgd"; }
final=$(grep '^{.*"final_loss"' train.log | tail -1)
[[ -n $final ]] || { cat train.log; fail "no --json line"; }
checkpoint=$(json_field checkpoint <<<"$final")
[[ $checkpoint == */step-$steps.h5 && -f $checkpoint ]] || { cat train.log; fail "no final checkpoint step-$steps.h5 (got '$checkpoint')"; }
h5ls "$checkpoint" >/dev/null 2>&1 || fail "$checkpoint is not an HDF5 file"
first_loss=$(sed -n 's/^epoch .* step 10\/[0-9]* loss \([0-9.]*\) .*/\1/p' train.log | head -1)
last_loss=$(sed -n "s/^epoch .* step $steps\/[0-9]* loss \([0-9.]*\) .*/\1/p" train.log | head -1)
final_loss=$(json_field final_loss <<<"$final")
[[ -n $first_loss && -n $last_loss && -n $final_loss ]] || { cat train.log; fail "no loss at steps 10 and $steps"; }
echo "signsgd np=2: loss $first_loss (steps 1-10) -> $last_loss (steps 41-$steps), final_loss $final_loss, $checkpoint"
awk -v a="$first_loss" -v b="$final_loss" 'BEGIN { exit !(b < 0.9 * a) }' ||
  { cat train.log; fail "loss did not go down: $first_loss at step 10, $final_loss at step $steps"; }
# From ln(10) = 2.30 at initialisation, 50 steps must have learnt something.
awk -v b="$final_loss" 'BEGIN { exit !(b < 1.5) }' || { cat train.log; fail "final loss $final_loss is not below 1.5"; }

# 4b. `mgtrain eval` of that checkpoint: the checkpoint records the library the run loaded, for
# diagnostics only. Without --plugin-path the plugin is refused, naming where the run loaded it.
! "$PREFIX/bin/mgtrain" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" >eval.log 2>eval.err ||
  { cat eval.log eval.err; fail "eval loaded signsgd from the path its checkpoint recorded"; }
grep -qF "the checkpoint's run loaded it from $(canon "$so"), which is not loaded on a checkpoint's word" eval.err ||
  { cat eval.err; fail "eval's refusal does not name where the checkpoint's run loaded signsgd"; }
"$PREFIX/bin/mgtrain" eval --checkpoint "$checkpoint" --data "$DATA_DIR/test.h5" --plugin-path "$PLUGIN_DIR" \
  >eval.log 2>eval.err || { cat eval.log eval.err; fail "eval with --plugin-path"; }
grep -q '^accuracy ' eval.log || { cat eval.log eval.err; fail "eval printed no accuracy"; }
h5dump -a /plugin_paths "$checkpoint" | grep -qF "optimizer:signsgd=$(canon "$so")" ||
  { h5dump -a /plugin_paths "$checkpoint"; fail "the checkpoint does not record signsgd's path"; }

# 4c. A plugin project with no build type, built by clang when it is installed (gcc built mgtrain,
# on the same libstdc++): Release flags by default, no refusal, and it trains.
CXX_OTHER=$(command -v clang++-14 || command -v clang++ || command -v c++)
mkdir -p other-src
cat >other-src/CMakeLists.txt <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(other_compiler_plugin LANGUAGES CXX)
find_package(mgtrain 1.0 REQUIRED)
mgtrain_add_plugin(optimizer signsgd SOURCES $SRC/examples/plugin/signsgd.cpp)
CMAKE
CXX=$CXX_OTHER cmake -S other-src -B other-build -DCMAKE_PREFIX_PATH="$PREFIX" >other-configure.log 2>&1 ||
  { cat other-configure.log; fail "configure a plugin with $CXX_OTHER"; }
grep -q "mgtrain_add_plugin(optimizer signsgd): CMAKE_BUILD_TYPE is empty; building it with the Release flags" \
  other-configure.log || { cat other-configure.log; fail "no default to Release flags without a build type"; }
! grep -q "will refuse" other-configure.log || { cat other-configure.log; fail "a warning about the compiler"; }
cmake --build other-build -- VERBOSE=1 >other-build.log 2>&1 || { cat other-build.log; fail "build with $CXX_OTHER"; }
grep 'signsgd.cpp' other-build.log | grep -q -- '-O3' || { cat other-build.log; fail "the plugin was not built with -O3"; }
"$PREFIX/bin/mgtrain" plugins --plugin-path other-build/plugins >plugins-other.txt 2>&1
grep -qE "^optimizer +signsgd .*other-build/plugins" plugins-other.txt ||
  { cat plugins-other.txt; fail "the plugin built by $CXX_OTHER is not usable"; }
timeout --kill-after=10 300 mpirun -np 2 --oversubscribe "$PREFIX/bin/mgtrain" train --config run.ini \
  --plugin-path other-build/plugins --optimizer.name=signsgd --optimizer.lr=0.001 --train.max_steps=5 \
  --checkpoint.dir="$WORK/ckpt-other" >train-other.log 2>&1 || { cat train-other.log; fail "training with the $CXX_OTHER plugin"; }
echo "plugin built by $CXX_OTHER: accepted and trained"

# 4d. A plugin source with no MGT_*_PLUGIN macro: the build fails, saying what is missing, and
# leaves no library for the loader to refuse at run time.
mkdir -p nomacro-src
cat >nomacro-src/tiny.cpp <<'CPP'
#include "mgtrain/layers.hpp"
std::unique_ptr<mgt::Layer> tiny() { return mgt::make_relu("relu"); }
CPP
cat >nomacro-src/CMakeLists.txt <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(no_macro_plugin LANGUAGES CXX)
find_package(mgtrain 1.0 REQUIRED)
mgtrain_add_plugin(model tiny SOURCES tiny.cpp)
CMAKE
cmake -S nomacro-src -B nomacro-build -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release >nomacro-configure.log 2>&1 ||
  { cat nomacro-configure.log; fail "configure a plugin with no macro"; }
cmake --build nomacro-build >nomacro-build.log 2>&1 && { cat nomacro-build.log; fail "a plugin with no macro built"; }
grep -q "libmgtrain-model-tiny.so: exports no mgtrain_plugin_descriptor: declare the plugin with MGT_MODEL_PLUGIN" \
  nomacro-build.log || { cat nomacro-build.log; fail "the build of a plugin with no macro did not say why it failed"; }
[[ ! -e nomacro-build/plugins/libmgtrain-model-tiny.so ]] || fail "the refused plugin library was left behind"

# 5. Installed into mgtrain's own prefix, the plugin is found with no --plugin-path.
cmake --install "$PLUGIN_BUILD" --prefix "$PREFIX" >install-plugin.log 2>&1 || { cat install-plugin.log; fail "install examples/plugin"; }
"$PREFIX/bin/mgtrain" plugins >plugins-installed.txt 2>&1 || { cat plugins-installed.txt; fail "mgtrain plugins"; }
line=$(grep -E '^optimizer +signsgd ' plugins-installed.txt) || { cat plugins-installed.txt; fail "installed signsgd not found"; }
[[ $(canon "$(awk '{print $4}' <<<"$line")") == "$(canon "$PREFIX/lib/mgtrain/plugins/libmgtrain-optimizer-signsgd.so")" ]] ||
  { cat plugins-installed.txt; fail "signsgd not taken from the prefix: $line"; }
echo "PASS"
