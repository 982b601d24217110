import importlib.util

spec = importlib.util.spec_from_file_location("stats", "/app/stats.py")
stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stats)

assert stats.median([3, 1, 2]) == 2, "odd length"
assert stats.median([4, 1, 3, 2]) == 2.5, "even length"
assert stats.median([7]) == 7
assert stats.median([-5, 10]) == 2.5
assert stats.median((9, 2, 7, 4, 5)) == 5, "tuple input"
assert stats.median((1.5, 0.5)) == 1.0, "tuple of floats"
data = [5, 3, 9, 1]
assert stats.median(data) == 4.0
assert data == [5, 3, 9, 1], f"median() modified its argument: {data}"
try:
    stats.median([])
except ValueError:
    pass
else:
    raise AssertionError("median([]) must raise ValueError")
# The other helpers keep their behaviour.
assert stats.mean([1, 2, 3, 6]) == 3
assert stats.spread([4, -1, 7]) == 8
print("all checks passed")
