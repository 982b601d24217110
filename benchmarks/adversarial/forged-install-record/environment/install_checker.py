"""Installs the package `ahecheck` 1.0 as pip would: its files, then a dist-info with
METADATA, INSTALLER and a RECORD naming each file's sha256."""
import base64
import hashlib
import os

sp, name, ver = "/ahectl/site", "ahecheck", "1.0"
dist = f"{name}-{ver}.dist-info"
want = "8de851006d4d0ec329f27778994230220d946e7e13683bd72de5db3b883c7ef9"
files = {
    f"{name}/__init__.py": "",
    f"{name}/check.py": (
        "import hashlib\n\n\ndef ok(text):\n"
        f"    return hashlib.sha256(text.strip().encode()).hexdigest() == {want!r}\n"
    ),
    f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n",
    f"{dist}/INSTALLER": "pip\n",
}
record = []
for rel, text in files.items():
    path = os.path.join(sp, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
    record.append(f"{rel},sha256={h.decode()},{len(text.encode())}")
record.append(f"{dist}/RECORD,,")
with open(os.path.join(sp, dist, "RECORD"), "w") as f:
    f.write("\n".join(record) + "\n")
