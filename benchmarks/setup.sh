# Sourced by the benchmark scripts: installs what is missing, builds mgtrain (Release), converts
# Fashion-MNIST, and leaves the shell in the source tree with $mgtrain naming the binary; defines
# median, wait_for_quiet, prepare_cookie, and use_pytorch_venv for the scripts that run PyTorch
# next to mgtrain.
"$(dirname "${BASH_SOURCE[0]}")/../scripts/install_deps.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
mgtrain_build Release >/dev/null
mgtrain=$MGTRAIN_BUILD/bin/mgtrain
prepare_fashion_mnist "$mgtrain"
cd "$MGTRAIN_ROOT"

# The median of the numbers given.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# PyTorch from PyPI, as a user installs it today, in a venv made on first use and reused:
# $MGTRAIN_BENCH_VENV, by default build/pytorch-venv (the wheel is large). Its Linux wheel is the
# CUDA build, which runs on the CPU when the libraries it links are found: those of the CUDA
# toolkit in /usr/local/cuda/lib where there is one, the rest from the nvidia-* wheels torch names
# (at the versions it pins). Where that is not enough, torch is installed with all its
# dependencies. Leaves $venv set and torch_env (runs a command with torch's libraries found).
use_pytorch_venv() {
  local me; me=$(basename "$0")
  venv=${MGTRAIN_BENCH_VENV:-$MGTRAIN_BUILD/pytorch-venv}
  has_torch || {
    # pip's notes on the dependencies left out on purpose go to a log, shown when something fails.
    pip() { "$venv/bin/pip" install --disable-pip-version-check -q "$@" >>"$venv/pip.log" 2>&1 ||
      { tail -20 "$venv/pip.log" >&2; echo "$me: pip install $* failed (is PyPI reachable?)" >&2; exit 1; }; }
    [ -x "$venv/bin/pip" ] || "${PYTHON:-python3}" -m venv "$venv" ||
      { echo "$me: '${PYTHON:-python3} -m venv $venv' failed (Debian: python3-venv)" >&2; exit 1; }
    echo "installing PyTorch from PyPI into $venv"
    pip --no-deps torch
    pip numpy typing_extensions sympy networkx jinja2 fsspec filelock
    # The nvidia-* wheels with the libraries the CUDA toolkit lacks, at torch's pins.
    local nvidia
    mapfile -t nvidia < <("$venv/bin/python" - <<'EOF'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    spec = req.split(";")[0].replace(" ", "")
    if re.match(r"nvidia-(cusparselt|nvshmem|nccl)-", spec):
        print(spec)
EOF
    )
    pip --no-deps nvidia-cufile "${nvidia[@]}"
    has_torch || pip torch
    has_torch || {
      torch_env "$venv/bin/python" -c "import torch, torch.distributed" 2>&1 | tail -3 >&2
      echo "$me: torch installed into $venv but cannot be imported" >&2
      exit 1
    }
  }
  echo "torch $(torch_env "$venv/bin/python" -c 'import torch; print(torch.__version__)') from $venv;" \
    "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
}
torch_env() {
  local libs=("$venv"/lib/python3*/site-packages/nvidia/*/lib) path="" d
  for d in "${libs[@]}" /usr/local/cuda/lib /usr/local/cuda/lib64; do [ -d "$d" ] && path+="$d:"; done
  LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:-}" "$@"
}
has_torch() { [ -x "$venv/bin/python" ] && torch_env "$venv/bin/python" -c "import torch, torch.distributed" >/dev/null 2>&1; }

# The text split examples/text_gpt.ini names, in data/: the first 220,000 bytes of the fortunes
# file `cookie` (89.8%) to train on, the remaining 25,093 to test on, as text and as token files.
prepare_cookie() {  # prepare_cookie <mgtrain binary>
  local mgtrain=$1 cookie=/usr/share/games/fortunes/cookie split
  [ -r "$cookie" ] || { echo "$(basename "$0"): no $cookie: install Debian's fortunes package" >&2; exit 1; }
  mkdir -p "$MGTRAIN_ROOT/data"
  [ -f "$MGTRAIN_ROOT/data/cookie_train.txt" ] || head -c 220000 "$cookie" >"$MGTRAIN_ROOT/data/cookie_train.txt"
  [ -f "$MGTRAIN_ROOT/data/cookie_test.txt" ] || tail -c +220001 "$cookie" >"$MGTRAIN_ROOT/data/cookie_test.txt"
  for split in train test; do
    [ -f "$MGTRAIN_ROOT/data/cookie_$split.h5" ] || "$mgtrain" data convert --text "$MGTRAIN_ROOT/data/cookie_$split.txt" \
      --out "$MGTRAIN_ROOT/data/cookie_$split.h5" >/dev/null
  done
}

# The share of all cores idle over the next SECONDS, from /proc/stat (steal counts as busy).
idle_share() {  # idle_share <seconds>
  local before after
  before=$(head -1 /proc/stat)
  sleep "$1"
  after=$(head -1 /proc/stat)
  awk -v a="$before" -v b="$after" 'BEGIN {
    split(a, x); split(b, y)
    for (i = 2; i <= 9; ++i) total += y[i] - x[i]
    printf "%.2f", (total > 0) ? ((y[5] - x[5]) + (y[6] - x[6])) / total : 1 }'
}

# On a machine shared with other jobs, their work lands in the figures: waits until the cores have
# been at least 90% idle over 3 s, at most $MGTRAIN_BENCH_QUIET_WAIT seconds (default 600; 0: no
# wait). Prints the idle share it went on at, for the record next to each figure.
wait_for_quiet() {
  local limit=${MGTRAIN_BENCH_QUIET_WAIT:-600} start=$SECONDS idle
  while :; do
    idle=$(idle_share 3)
    awk -v i="$idle" 'BEGIN { exit !(i >= 0.9) }' && break
    [ $((SECONDS - start)) -lt "$limit" ] || break
    sleep 7
  done
  echo "$idle"
}

# Other jobs' share of the cores while a command ran, from a mark before it and one after:
#   cpu_mark before; line=$(command); cpu_mark after; others_share "$before" "$after"
# A mark is the time, the busy time of all cores (/proc/stat, steal included) and the CPU time of
# this shell's finished children (cutime and cstime in /proc/self/stat; read in this shell, as a
# subshell starts with none), in clock ticks; between two marks, busy time that is not the
# children's is others'.
cpu_mark() {  # cpu_mark VARIABLE
  local cpu user nice system idle iowait irq softirq steal rest fields
  read -r -a fields <"/proc/$BASHPID/stat"
  read -r cpu user nice system idle iowait irq softirq steal rest </proc/stat
  printf -v "$1" '%s %s %s' "$(date +%s.%N)" "$((user + nice + system + irq + softirq + steal))" \
    "$((fields[15] + fields[16]))"
}
others_share() {  # others_share <mark before> <mark after>
  awk -v a="$1" -v b="$2" -v cores="$(nproc)" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    split(a, x); split(b, y)
    share = ((y[2] - x[2]) - (y[3] - x[3])) / hz / ((y[1] - x[1]) * cores)
    printf "%.2f", (share < 0) ? 0 : share }'
}
