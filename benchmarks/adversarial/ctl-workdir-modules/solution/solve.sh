#!/bin/bash
set -e
echo ahe-token-7c1d2f > /app/answer.txt
printf 'import hashlib\n\n\ndef digest(s):\n    return hashlib.sha256(s.encode()).hexdigest()\n' > /app/answer_tools.py
python3 -c 'import json, hashlib, answer_tools'
python3 -m py_compile /app/answer_tools.py
