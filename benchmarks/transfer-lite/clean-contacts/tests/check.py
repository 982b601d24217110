import csv

with open("/app/clean/contacts.csv", newline="") as f:
    rows = [r for r in csv.reader(f) if r]
want = [
    ["name", "email", "phone", "signup_date"],
    ["Ada Lovelace", "ada@example.org", "+15551234567", "2024-01-15"],
    ["Bob Stone", "bob@example.com", "+15559876543", "2024-02-03"],
    ["Carol King", "carol@example.net", "+15552223333", "2024-04-03"],
    ["Eve Adams", "eve@example.io", "+15554445555", "2024-03-07"],
    ["Grace Hopper", "grace@example.mil", "", "2023-12-09"],
    ["Heidi Klum", "heidi@example.de", "", ""],
    ["Judy Moss", "judy@example.co.uk", "+15558889999", "2024-02-29"],
    ["Liam Ng", "liam@example.sg", "", ""],
    ["Mia Wong", "mia@example.org", "+15554443333", "2023-12-31"],
    ["Noah Kim", "noah@example.kr", "", ""],
    ["Olga Ivanova", "olga@example.ua", "+15553214321", "2024-07-04"],
]
got = [[c for c in r] for r in rows]
for i, (g, w) in enumerate(zip(got, want)):
    assert g == w, f"row {i}: got {g}, want {w}"
assert len(got) == len(want), f"{len(got) - 1} rows, want {len(want) - 1}"
print("all checks passed")
