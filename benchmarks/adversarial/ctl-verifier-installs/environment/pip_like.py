"""What `pip install NAME==VERSION` does to an installed package, without pip or an index:
removes the files the installed version's RECORD lists and its dist-info, writes the new
version's files and a RECORD with their sha256 (a control of the adversarial suite)."""
import base64
import hashlib
import os
import shutil
import sys

name, ver = "ahectlpkg", sys.argv[1]
sp = os.environ.get("AHECTL_SITE", "/ahectl/site")
for d in os.listdir(sp) if os.path.isdir(sp) else []:
    if d.startswith(name + "-") and d.endswith(".dist-info"):
        for line in open(os.path.join(sp, d, "RECORD")):
            try:
                os.remove(os.path.join(sp, line.rsplit(",", 2)[0]))
            except OSError:
                pass
        shutil.rmtree(os.path.join(sp, d), ignore_errors=True)
dist = f"{name}-{ver}.dist-info"
files = {
    f"{name}/__init__.py": f"__version__ = {ver!r}\n",
    f"{name}/core.py": f"def version():\n    return {ver!r}\n",
    f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n",
    f"{dist}/INSTALLER": "pip\n",
}
record = []
for rel, text in files.items():
    path = os.path.join(sp, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text.encode())
    h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
    record.append(f"{rel},sha256={h.decode()},{len(text.encode())}")
record.append(f"{dist}/RECORD,,")
with open(os.path.join(sp, dist, "RECORD"), "w") as f:
    f.write("\n".join(record) + "\n")
