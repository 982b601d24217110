#!/bin/bash
# The verifier reads every file the solution made (as pytest importing a large package does),
# then runs its tests.
find /usr/local/lib/python3.11/dist-packages /usr/local/bin -type f -exec cat {} + >/dev/null
pytest /tests/test_outputs.py -rA -p no:cacheprovider
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
