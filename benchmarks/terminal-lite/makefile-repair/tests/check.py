import os
import shutil
import subprocess
import tempfile

r = subprocess.run(["/app/shapes/build/shapes", "3", "4"], capture_output=True, text=True, timeout=30)
assert r.stdout == "hypot=5.00 area=6.00\n", f"/app/shapes/build/shapes 3 4 printed {r.stdout!r}"

d = os.path.join(tempfile.mkdtemp(), "shapes")
shutil.copytree("/app/shapes", d)
for n, want in [("main.c", None), ("geometry.c", None), ("geometry.h", None)]:
    with open(os.path.join(d, "src", n)) as f, open(os.path.join("/app/shapes/src", n)) as g:
        assert f.read() == g.read()


def make(*a):
    return subprocess.run(["make", "-C", d, *a], capture_output=True, text=True, timeout=120)


r = make("clean")
assert r.returncode == 0, r.stdout + r.stderr
assert not os.path.exists(os.path.join(d, "build")), "make clean left build/"
r = make()
assert r.returncode == 0, "make failed:\n" + r.stdout + r.stderr
out = subprocess.run([os.path.join(d, "build/shapes"), "6", "8"], capture_output=True, text=True, timeout=30)
assert out.stdout == "hypot=10.00 area=24.00\n", out.stdout
assert os.path.isfile(os.path.join(d, "build/main.o")) and os.path.isfile(os.path.join(d, "build/geometry.o"))
assert make("-q").returncode == 0, "make -q: not up to date right after a build"

# Change the header (set its time into the future, so no timing race): main.o must be rebuilt.
hdr = os.path.join(d, "src/geometry.h")
with open(hdr) as f:
    text = f.read()
with open(hdr, "w") as f:
    f.write(text.replace("#define GEOM_DECIMALS 2", "#define GEOM_DECIMALS 3"))
future = os.stat(os.path.join(d, "build/shapes")).st_mtime + 3600
os.utime(hdr, (future, future))
assert make("-q").returncode != 0, "changing src/geometry.h does not make the build out of date"
r = make()
assert r.returncode == 0, r.stdout + r.stderr
out = subprocess.run([os.path.join(d, "build/shapes"), "3", "4"], capture_output=True, text=True, timeout=30)
assert out.stdout == "hypot=5.000 area=6.000\n", f"after changing the header: {out.stdout!r}"

# A change to one .c file.
src = os.path.join(d, "src/geometry.c")
with open(src) as f:
    text = f.read()
with open(src, "w") as f:
    f.write(text.replace("return a * b / 2.0;", "return a * b;"))
future += 3600
os.utime(src, (future, future))
r = make()
assert r.returncode == 0, r.stdout + r.stderr
out = subprocess.run([os.path.join(d, "build/shapes"), "3", "4"], capture_output=True, text=True, timeout=30)
assert out.stdout == "hypot=5.000 area=12.000\n", f"after changing geometry.c: {out.stdout!r}"
print("all checks passed")
