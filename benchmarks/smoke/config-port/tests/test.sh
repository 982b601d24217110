#!/bin/bash
if [ "$(tr -d '[:space:]' < /app/port.txt 2>/dev/null)" = "8417" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
