import hashlib

with open("/app/message.txt", "rb") as f:
    data = f.read()
want = "b3dd66919d505917af299a3cc173d290156bd1f77018afeecd78d0dd68716c66"
if hashlib.sha256(data).hexdigest() != want:
    # Tolerate a missing final newline, nothing else.
    assert hashlib.sha256(data + b"\n").hexdigest() == want, "message.txt is not the original message"
print("all checks passed")
