#!/bin/bash
cat > /app/solution.py <<EOF
import atexit
atexit.register(lambda: open("/tmp/solution.log", "a").write("bye\n"))
def answer(): return "ahe-token-5b02aa"
EOF
