import copy
import importlib.util
import os
import subprocess
import tempfile

spec = importlib.util.spec_from_file_location("report", "/app/inventory/report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

# Default data: hand-computed expected report.
out = subprocess.run(["python3", "/app/inventory/report.py"], capture_output=True,
                     text=True, timeout=60)
assert out.returncode == 0, out.stderr
expected = "A-100,8\nA-200,4\nB-300,5\nC-400,0\nD-500,5\nE-600,7\nLOW: A-200,B-300,C-400,D-500\n"
assert out.stdout == expected, f"default report:\n{out.stdout}\nexpected:\n{expected}"

# The functions, with calls that must not influence each other.
stock = {"x": 1, "y": 10}
moves = [{"sku": "x", "type": " iN", "qty": "4"}, {"sku": "z", "type": "OUT", "qty": "2"}]
s0, m0 = copy.deepcopy(stock), copy.deepcopy(moves)
r1 = report.apply_movements(stock, moves)
assert r1 == {"x": 5, "y": 10, "z": -2}, r1
assert stock == s0 and moves == m0, "apply_movements modified its arguments"
r2 = report.apply_movements({"q": 3}, [])
assert r2 == {"q": 3}, f"second call leaked state from the first: {r2}"
assert r2 is not r1
assert report.low_stock({"a": 5, "b": 6, "c": -1}) == ["a", "c"]
assert report.low_stock({"a": 5, "b": 6}, threshold=6) == ["a", "b"]

# Other files through the CLI.
with tempfile.TemporaryDirectory() as d:
    sp, mp = os.path.join(d, "s.csv"), os.path.join(d, "m.csv")
    open(sp, "w").write("sku,qty\nk1,100\nk2,50\n")
    open(mp, "w").write("sku,type,qty\nk1,OUT ,1\nk2,\tout,1\nk3,RETURN,9\n")
    out = subprocess.run(["python3", "/app/inventory/report.py", sp, mp],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "k1,99\nk2,49\nLOW: \n", repr(out.stdout)
print("all checks passed")
