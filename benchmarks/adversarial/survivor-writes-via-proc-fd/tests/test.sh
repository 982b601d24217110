#!/bin/bash
# Terminal-Bench 2 shape: pytest on the test file, reward 1/0 by its exit status.
pytest /tests/test_outputs.py -rA -p no:cacheprovider
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
