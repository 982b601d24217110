#!/usr/bin/env bash
# scripts/check-docs.sh: the repository's own checks, on their own (cargo test --workspace runs
# them too, in the `cli` test binary of ahe-cli):
#   docs::     every relative link in README.md and docs/*.md resolves (file, and heading for a
#              #anchor), docs/SUMMARY.md lists every page, README.md <= 250 lines with the test
#              command in its Quick start, no citation of design notes outside the repository;
#   hygiene::  functions over 80 lines in src, and run-directory file names spelled outside
#              ahe-rundir / ahe-bench/src/layout.rs: listed with file:line, and failing when
#              their number grows past the one recorded in crates/ahe-cli/tests/cli/hygiene.rs.
# Prints the lists (--nocapture); exit status of cargo test. AHE_CHECK_ROOT=DIR runs the same
# checks on another checkout (e.g. a `git archive` of a branch) with this tree's test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test -p ahe-cli --test cli -- --nocapture docs:: hygiene::
