"""Writes /app/logs/auth.log, auth.log.1 and the gzip-compressed auth.log.2.gz .. auth.log.4.gz."""
import gzip
import os
import random

rng = random.Random(4242)
users = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
         "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter"]
# Who ever logs in successfully, and in which file (0 = auth.log ... 4 = auth.log.4.gz).
success = {0: ["alice", "bob"], 1: ["carol", "alice"], 2: ["dave", "erin"],
           3: ["grace", "bob", "olivia"], 4: ["trent", "walter"]}
os.makedirs("/app/logs", exist_ok=True)
for n in range(5):
    lines = []
    for _ in range(400):
        u = rng.choice(users)
        ip = f"192.0.2.{rng.randint(1, 254)}"
        port = rng.randint(30000, 60000)
        kind = rng.randint(0, 3)
        if kind == 0:
            lines.append(f"Failed password for {u} from {ip} port {port} ssh2")
        elif kind == 1:
            lines.append(f"Failed password for invalid user {u}x from {ip} port {port} ssh2")
        elif kind == 2:
            lines.append(f"Connection closed by authenticating user {u} {ip} port {port} [preauth]")
        else:
            lines.append(f"pam_unix(sshd:auth): authentication failure; user={u} rhost={ip}")
    for u in success[n]:
        method = rng.choice(["password", "publickey"])
        extra = " ssh2: ED25519 SHA256:abc" if method == "publickey" else " ssh2"
        lines.append(f"Accepted {method} for {u} from 198.51.100.{rng.randint(1, 254)} port 22{extra}")
    rng.shuffle(lines)
    text = "".join(f"Mar {10 - n:2d} 0{i % 10}:{i % 60:02d}:{(i * 7) % 60:02d} gw sshd[{1000 + i}]: {l}\n"
                   for i, l in enumerate(lines))
    name = "/app/logs/auth.log" + ("" if n == 0 else f".{n}")
    if n >= 2:
        with gzip.open(name + ".gz", "wt") as f:
            f.write(text)
    else:
        with open(name, "w") as f:
            f.write(text)
