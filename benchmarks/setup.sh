# Sourced by the benchmark scripts: installs what is missing, builds mgtrain (Release), converts
# Fashion-MNIST, and leaves the shell in the source tree with $mgtrain naming the binary.
"$(dirname "${BASH_SOURCE[0]}")/../scripts/install_deps.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
mgtrain_build Release >/dev/null
mgtrain=$MGTRAIN_BUILD/bin/mgtrain
prepare_fashion_mnist "$mgtrain"
cd "$MGTRAIN_ROOT"

# The median of the numbers given.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
