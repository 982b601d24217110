with open("/app/users.txt") as f:
    got = [l.strip() for l in f.read().split("\n") if l.strip()]
want = ["alice", "bob", "carol", "dave", "erin", "grace", "olivia", "trent", "walter"]
assert got == want, f"got {got}, want {want}"
print("all checks passed")
