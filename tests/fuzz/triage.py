#!/usr/bin/env python3
"""Replays every input a fuzzer saved (crash-, leak-, oom-, timeout-, slow-unit-) and sorts them
by where the fault is: in mgtrain's own code (a finding to fix), or inside libhdf5 (the system's
uninstrumented library or the instrumented build of tests/fuzz/build_hdf5.sh, reached through an
ordinary API call). One group per (owner, kind, first
frame of that owner); each group lists its inputs and one full report.

usage: triage.py FUZZER ARTIFACT_DIR SOURCE_ROOT REPORT
exit: 0 nothing saved, 3 only libhdf5 faults, 1 any fault in mgtrain or one that does not replay
"""
import os
import re
import subprocess
import sys

HDF5_SOURCE = re.compile(r"/hdf5-[^/\s]+/src/\S+\.[ch]:\d+")
FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (.*)$")
# A sanitizer's or libFuzzer's error line, UBSan's "FILE:LINE:COL: runtime error: ...", or the
# message of an invariant the target checks itself.
KIND = re.compile(r"ERROR: ((?:AddressSanitizer|LeakSanitizer|libFuzzer): .*?)(?: on | \(|: 0x|$)"
                  r"|(\S+: runtime error: .*)|^(fuzz_\w+: (?!Running).*)")


def replay(fuzzer, path):
    try:
        p = subprocess.run([fuzzer, "-timeout=10", "-rss_limit_mb=2048", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        return -1, (e.stdout or b"").decode(errors="replace") + "\n(replay timed out)"


def classify(out, root):
    kind = None
    for line in out.splitlines():
        m = KIND.search(line)
        if m:
            kind = next(g for g in m.groups() if g)
            break
    # The fault's own stack: the first one printed after the error line.
    frames, started = [], False
    for line in out.splitlines()[next((i for i, l in enumerate(out.splitlines())
                                       if kind and kind in l), 0):]:
        m = FRAME.match(line)
        if m:
            started = True
            frames.append(m.group(1))
        elif started:
            break
    # The first frame that is neither the sanitizer runtime, libFuzzer nor the C/C++ runtime: a
    # line of mgtrain's sources (the target's own invariant checks included), or libhdf5.
    source = re.compile(re.escape(root.rstrip("/")) + r"/(?!build)\S+\.(?:cpp|hpp|h|cc):\d+")
    owner, where = "unknown", "?"
    for text in frames:
        name = text[3:].split("(")[0].split(" ")[0] if text.startswith("in ") else ""
        if source.search(text):
            owner, where = "mgtrain", name
            break
        # The system's libhdf5 (a shared library, no line numbers) or the instrumented one that
        # tests/fuzz/build_hdf5.sh builds (linked in, its frames name its sources).
        if "libhdf5" in text or HDF5_SOURCE.search(text):
            module = re.search(r"\((\S*libhdf5\S*)\)", text)
            owner, where = "libhdf5", name or (os.path.basename(module.group(1)) if module else "?")
            break
    if kind and "runtime error:" in kind:  # UBSan names the line itself
        loc, kind = kind.split(": runtime error: ", 1)
        owner = "mgtrain" if source.search(loc) else owner
        where = os.path.relpath(loc.rsplit(":", 2)[0], root) + ":" + loc.rsplit(":", 2)[1]
        kind = "runtime error: " + re.sub(r"-?\d[\d.e+]*", "N", kind)
    return owner, kind or "no report", where


def main():
    fuzzer, art_dir, root, report = sys.argv[1:5]
    names = sorted(n for n in os.listdir(art_dir)
                   if n.split("-")[0] in ("crash", "leak", "oom", "timeout", "slow"))
    groups = {}
    for n in names:
        path = os.path.join(art_dir, n)
        rc, out = replay(fuzzer, path)
        if rc == 0:
            key, out = ("unreproduced", n.split("-")[0], "?"), out
        else:
            key = classify(out, root)
        groups.setdefault(key, []).append((n, os.path.getsize(path), out))
    with open(report, "w") as f:
        f.write(f"{len(names)} saved input(s) in {art_dir}, {len(groups)} group(s)\n")
        for (owner, kind, where), items in sorted(groups.items()):
            f.write(f"\n=== {owner}: {kind} at {where}: {len(items)} input(s)\n")
            for n, size, _ in items:
                f.write(f"  {n} ({size} bytes)\n")
            example = items[0][2]
            lines = [l for l in example.splitlines()
                     if not l.startswith(("INFO:", "MS:", "***", "Running:")) and l.strip()]
            f.write("  --- replay of " + items[0][0] + "\n")
            f.write("".join("  " + l + "\n" for l in lines[:60]))
    summary = {}
    for (owner, kind, where), items in groups.items():
        summary[owner] = summary.get(owner, 0) + len(items)
    print("triage: " + (", ".join(f"{v} input(s) {k}" for k, v in sorted(summary.items()))
                        or "nothing saved") + f"; report {report}")
    if not groups:
        return 0
    return 3 if set(summary) == {"libhdf5"} else 1


if __name__ == "__main__":
    sys.exit(main())
