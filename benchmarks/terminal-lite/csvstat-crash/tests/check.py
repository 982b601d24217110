import os
import shutil
import subprocess
import tempfile

work = tempfile.mkdtemp()
src = os.path.join(work, "csvstat")
shutil.copytree("/app/csvstat", src)
for junk in ["csvstat"]:
    if os.path.exists(os.path.join(src, junk)):
        os.remove(os.path.join(src, junk))
b = subprocess.run(["make", "-C", src], capture_output=True, text=True, timeout=120)
assert b.returncode == 0, "make failed on the fixed source:\n" + b.stdout + b.stderr
BIN = os.path.join(src, "csvstat")
assert os.access("/app/csvstat/csvstat", os.X_OK), "/app/csvstat/csvstat is not built"


def run(text, col, name="in.csv", binary=BIN):
    p = os.path.join(work, name)
    if text is not None:
        with open(p, "w") as f:
            f.write(text)
    return subprocess.run([binary, p, col], capture_output=True, text=True, timeout=30)


def expect(text, col, out):
    for binary in (BIN, "/app/csvstat/csvstat"):
        r = run(text, col, binary=binary)
        assert r.returncode == 0, f"{binary} {col}: exit {r.returncode} ({r.stderr}) on {text[:80]!r}"
        assert r.stdout == out + "\n", f"{binary} {col}: got {r.stdout!r}, want {out!r}"


expect("city,temp,rain\nOslo,4.5,12\nLima,,0\nCairo,31.0,\nPerth,22.25,3\n", "temp",
       "count=3 min=4.50 max=31.00 mean=19.25")
expect("city,temp,rain\nOslo,4.5,12\nLima,,0\nCairo,31.0,\nPerth,22.25,3\n", "rain",
       "count=3 min=0.00 max=12.00 mean=5.00")
# Empty lines and a missing final newline.
expect("a,b\n1,2\n\n3,4\n\n5,-6", "b", "count=3 min=-6.00 max=4.00 mean=0.00")
# A very long line: a wide row whose last field is the column.
wide = ",".join(f"h{i}" for i in range(20000))
row1 = ",".join(str(i % 7 + 1) for i in range(20000))
row2 = ",".join("1000000" for _ in range(20000))
expect(wide + "\n" + row1 + "\n" + row2 + "\n", "h19999", "count=2 min=1.00 max=1000000.00 mean=500000.50")
# A long text field before the column.
expect("note,val\n" + "x" * 300000 + ",7\n" + "y,1\n", "val", "count=2 min=1.00 max=7.00 mean=4.00")
# Nothing to count.
expect("a,b\n", "a", "count=0")
expect("a,b\n,5\n,6\n", "a", "count=0")
# Errors.
r = run(None, "a", name="does-not-exist.csv")
assert r.returncode == 1 and r.stderr.strip(), f"missing file: exit {r.returncode}"
r = run("a,b\n1,2\n", "c")
assert r.returncode == 2 and r.stderr.strip(), f"unknown column: exit {r.returncode}"
print("all checks passed")
