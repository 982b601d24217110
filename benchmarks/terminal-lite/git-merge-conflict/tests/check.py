import configparser
import subprocess

REPO = "/app/shop"
MAIN = "b1dbfffef1950b982945a1c30553f8cf67db2695"
FEATURE = "6302fe70d55fe57085c49201b4ad6676e4ccac8a"


def git(*a):
    return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, timeout=60)


assert git("symbolic-ref", "--short", "HEAD").stdout.strip() == "main", "main is not checked out"
parents = git("rev-list", "--parents", "-n", "1", "HEAD").stdout.split()[1:]
assert parents == [MAIN, FEATURE], f"HEAD's parents are {parents}, want [main tip, feature tip]"
assert git("status", "--porcelain").stdout == "", "working tree not clean"
assert git("rev-parse", "feature/retries").stdout.strip() == FEATURE, "feature/retries was changed"

text = git("show", "HEAD:settings.ini").stdout
assert not any(m in text for m in ("<<<<<<<", "=======", ">>>>>>>")), "conflict markers left"
cfg = configparser.ConfigParser()
cfg.read_string(text)
got = {s: dict(cfg[s]) for s in cfg.sections()}
want = {
    "server": {"host": "0.0.0.0", "port": "8081", "timeout": "60", "retries": "3"},
    "client": {"user_agent": "shop/1.1"},
    "logging": {"level": "info"},
}
assert got == want, f"settings.ini: {got}\nwant: {want}"
files = set(git("ls-tree", "--name-only", "HEAD").stdout.split())
assert {"retry.py", "client.py", "settings.ini"} <= files, files
print("all checks passed")
