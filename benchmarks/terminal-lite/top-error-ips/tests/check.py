path = "/app/top_ips.txt"
with open(path) as f:
    lines = [l.strip() for l in f.read().strip().splitlines()]
want = ["10.44.81.86 41", "10.103.229.207 37", "10.245.53.74 29"]
assert [" ".join(l.split()) for l in lines] == want, f"got {lines}, want {want}"
print("all checks passed")
