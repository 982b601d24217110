import json

with open("/app/people.json", encoding="utf-8") as f:
    got = json.load(f)
want = [
    {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "city": "London"},
    {"name": "Smith, Jr., John", "age": 41, "email": "john.smith@example.com", "city": "Portland, OR"},
    {"name": "Grace Hopper", "age": None, "email": "grace@example.org", "city": "Arlington"},
    {"name": 'Zoë "Zed" Quinn', "age": 29, "email": None, "city": "Montréal"},
    {"name": "Linus", "age": 7, "email": "linus@example.net", "city": None},
]
assert got == want, f"got {got}"
assert all(type(p["age"]) is int for p in got if p["age"] is not None), "age must be an integer"
print("all checks passed")
