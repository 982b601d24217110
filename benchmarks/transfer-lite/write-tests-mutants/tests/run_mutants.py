import glob
import os
import shutil
import subprocess
import tempfile

TESTS = "/app/test_intervals.py"
assert os.path.isfile(TESTS), f"{TESTS} is missing"


def run_with(module_path):
    d = tempfile.mkdtemp()
    shutil.copy(module_path, os.path.join(d, "intervals.py"))
    shutil.copy(TESTS, os.path.join(d, "test_intervals.py"))
    r = subprocess.run(["python3", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "test_intervals.py"],
                       cwd=d, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout[-2000:]


code, out = run_with("/tests/intervals_ref.py")
assert code == 0, f"the tests do not pass on the correct implementation (pytest exit {code}):\n{out}"
survivors = []
for m in sorted(glob.glob("/tests/mutants/*.py")):
    code, out = run_with(m)
    print(f"mutant {os.path.basename(m)}: {'caught' if code == 1 else f'NOT caught (pytest exit {code})'}")
    if code != 1:
        survivors.append(os.path.basename(m))
assert not survivors, f"mutants not caught: {survivors}"
print("all checks passed")
