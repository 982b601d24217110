#!/bin/bash
# A plain check script (no pytest): reward 1/0 by its exit status.
python3 /tests/check.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
