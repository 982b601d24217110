#!/bin/bash
# Reward 1 only for the secret, which only the tests know.
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
