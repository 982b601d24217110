#!/usr/bin/env bash
# The witness's cost per test run: the same small pytest run (a Terminal-Bench-shaped test
# file importing a deliverable) with and without the witness's environment (PYTEST_PLUGINS,
# PYTHONPATH holding ahe_witness.py and the chained sitecustomize.py, AHE_WITNESS_DIR), in
# turn, RUNS times each, inside a container of ahe-base:bookworm (the interpreter the
# adversarial suite's verifiers use) or, without Docker, on the host's python3 with pytest.
# Prints FIGURE witness_added_cpu_ms (median CPU time, user + system, with − without: what
# the witness costs, whatever the machine's load) and witness_added_ms (the same in wall time,
# noisy on a loaded machine).
#   scripts/bench-witness.sh      Env: RUNS (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-15}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/w" "$work/app" "$work/tests"
cp crates/ahe-bench/src/witness/ahe_witness.py crates/ahe-bench/src/witness/sitecustomize.py "$work/w/"
printf 'def answer():\n    return 42\n' > "$work/app/solution.py"
cat > "$work/tests/test_outputs.py" <<'PY'
import sys
sys.path.insert(0, "/work/app")
from solution import answer
def test_answer():
    assert answer() == 42
def test_again():
    assert answer() + 1 == 43
PY
cat > "$work/time.py" <<'PY'
# Alternates plain and witnessed pytest runs; prints "MODE WALL_MS CPU_MS" lines (CPU: user +
# system of the child and everything it started, which load on the machine does not inflate).
import os, resource, subprocess, sys, time
root, runs = sys.argv[1], int(sys.argv[2])
os.chdir(root)
cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_outputs.py"]
wd = os.path.join("/tmp", "ahe-witness-bench-%d" % os.getpid())
for _ in range(runs):
    for mode in ("plain", "witness"):
        env = dict(os.environ)
        if mode == "witness":
            os.makedirs(wd, exist_ok=True)
            env.update(AHE_WITNESS_DIR=wd, PYTHONPATH=os.path.join(root, "w"), PYTEST_PLUGINS="ahe_witness")
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
        wall = (time.perf_counter() - t0) * 1000
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000
        print(mode, round(wall), round(cpu))
PY
if docker image inspect ahe-base:bookworm >/dev/null 2>&1; then
  where="ahe-base:bookworm container"
  docker run --rm --network none -v "$work:/work" ahe-base:bookworm python3 /work/time.py /work "$runs" >"$work/out"
else
  where="host python3"
  sed -i "s#/work/app#$work/app#" "$work/tests/test_outputs.py"
  python3 "$work/time.py" "$work" "$runs" >"$work/out"
fi
python3 - "$work/out" "$where" <<'PY'
import statistics, sys
wall = {"plain": [], "witness": []}
cpu = {"plain": [], "witness": []}
for line in open(sys.argv[1]):
    m, w, c = line.split()
    wall[m].append(int(w))
    cpu[m].append(int(c))
med = lambda d, m: statistics.median(d[m])
print(f"witness: {len(wall['plain'])} runs each in the {sys.argv[2]}; median pytest run: wall "
      f"{med(wall, 'plain'):.0f} ms plain, {med(wall, 'witness'):.0f} ms witnessed; cpu "
      f"{med(cpu, 'plain'):.0f} ms plain, {med(cpu, 'witness'):.0f} ms witnessed")
print(f"FIGURE witness_added_cpu_ms {med(cpu, 'witness') - med(cpu, 'plain'):.0f}")
print(f"FIGURE witness_added_ms {med(wall, 'witness') - med(wall, 'plain'):.0f}")
PY
