#!/bin/bash
# Verifier: the agent's tests must pass on the reference module and fail on every mutant.
mkdir -p /logs/verifier
if python3 /tests/run_mutants.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
