#!/usr/bin/env bash
# scripts/fresh-test.sh [N]: runs the README's test command (`cargo test --workspace`) N times
# (default 1), each on a fresh `git clone` of the current HEAD in a new temp dir, with cold
# caches, and reports per run the wall time of the compile (`cargo test --workspace --no-run`)
# and of the tests (`cargo test --workspace`), the failed tests by name and test binary, the 10
# slowest test binaries, and a summary at the end. Exits non-zero when any run failed.
#
# Cold per run: a new CARGO_TARGET_DIR, a new TMPDIR (mode 1777: sandboxes run as uid 100000
# and must reach it; its parents are made traversable), so no local-backend state
# (`$TMPDIR/ahe-local-*`) of an earlier run exists. What stays warm: cargo's registry and git
# caches under $CARGO_HOME (~/.cargo: downloaded crate sources, not compiled code), docker's
# images, and $HOME (the model under ~/.cache, Harbor's state). Only committed work is tested:
# the clone has HEAD, not the working tree's changes.
#
# After a run, `ahe sandbox reap` (without --all: only what dead processes left, never another
# user's live containers) cleans up, and the run's directory is removed but for its logs.
#
# Environment:
#   FRESH_TEST_REF   the commit to test (default HEAD of this repository)
#   FRESH_TEST_OUT   where the logs go (default a new /tmp/ahe-fresh-test.XXXXXX)
#   FRESH_TEST_ARGS  extra arguments for both cargo commands, e.g. --no-fail-fast (default
#                    none: the README's command exactly, which stops at the first failing binary)
#   FRESH_TEST_KEEP  1: keep each run's clone and target dir
#   FRESH_TEST_CI    1 (default): as .ci/run does, CI=true and AHE_TB2_REAL=1 (a missing engine,
#                    browser or stand-in fails its tests instead of skipping them); 0: neither
#
# Disk: each run also reports the free space on the target dir's file system at its start and
# the least seen during it (sampled every 5 s), i.e. what the command needs.
# Run it under `nice -n 10` on a shared machine; every child inherits the niceness.
set -euo pipefail

n="${1:-1}"
case "$n" in
'' | *[!0-9]* | 0)
    echo "usage: $0 [N]  (N >= 1 runs)" >&2
    exit 2
    ;;
esac
repo="$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel)"
ref="${FRESH_TEST_REF:-HEAD}"
sha="$(git -C "$repo" rev-parse --verify "$ref^{commit}")"
out="${FRESH_TEST_OUT:-$(mktemp -d /tmp/ahe-fresh-test.XXXXXX)}"
mkdir -p "$out"
# shellcheck disable=SC2206
extra=(${FRESH_TEST_ARGS:-})

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

# Parses a `cargo test` log: which binary each line of libtest output came from (cargo's
# "Running ..." / "Doc-tests ..." lines), named as package/target through the compile step's
# JSON (executable -> package and target). Prints the failures ("FAIL <binary>: <test>", or
# "FAIL <binary>: (binary did not finish: ...)" when it crashed or was killed without a
# FAILED line) and the binaries' own times ("TIME <secs> <binary>").
parse_log() {
    local log="$1" map="$2"
    awk -v mapfile="$map" '
    BEGIN { while ((getline l < mapfile) > 0) { split(l, f, "\t"); name[f[1]] = f[2] } }
    function binname(s,   p) {
        if (match(s, /\(([^)]*)\)/)) {
            p = substr(s, RSTART + 1, RLENGTH - 2)
            if (p in name) return name[p]
            sub(/.*\//, "", p); return p
        }
        return s
    }
    /^ *Running / { cur = binname($0); failed[cur] = 0; next }
    /^ *Doc-tests / { cur = "doc-tests " $2; failed[cur] = 0; next }
    /^test .* \.\.\. FAILED$/ {
        t = $0; sub(/^test /, "", t); sub(/ \.\.\. FAILED$/, "", t)
        print "FAIL " cur ": " t; failed[cur]++; next
    }
    /^test result: / {
        if (match($0, /finished in [0-9.]+s/)) {
            s = substr($0, RSTART + 12, RLENGTH - 13); print "TIME " s " " cur
        }
        done[cur] = 1; next
    }
    /process didn.t exit successfully/ {
        if (!failed[cur] && !done[cur]) { print "FAIL " cur ": (binary did not finish: " $0 ")" }
        next
    }
    ' "$log"
}

echo "fresh-test: $n run(s) of \`cargo test --workspace\` at $sha (${ref}); logs in $out"
echo "fresh-test: warm: ~/.cargo registry/git caches, docker images, \$HOME; cold: clone, target dir, TMPDIR"
fails=0
summary=()
for i in $(seq 1 "$n"); do
    run="$(mktemp -d /tmp/ahe-fresh-run.XXXXXX)"
    logs="$out/run-$i"
    mkdir -p "$logs"
    # The sandbox user (uid 100000) must traverse to TMPDIR.
    chmod 755 "$run"
    git clone -q --no-hardlinks "$repo" "$run/src"
    git -C "$run/src" checkout -q --detach "$sha"
    mkdir -p "$run/tmp"
    chmod 1777 "$run/tmp"
    export CARGO_TARGET_DIR="$run/target" TMPDIR="$run/tmp"
    if [ "${FRESH_TEST_CI:-1}" = 1 ]; then
        export CI=true AHE_TB2_REAL=1
    fi
    free0="$(df --output=avail -k "$run" | tail -1)"
    (
        least="$free0"
        while sleep 5; do
            f="$(df --output=avail -k "$run" 2>/dev/null | tail -1)" || break
            if [ "$f" -lt "$least" ]; then least="$f"; echo "$least" >"$logs/least-free-kb"; fi
        done
    ) &
    sampler=$!
    rm -rf "$TMPDIR"/ahe-local-*
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "=== run $i/$n in $run (load $load, $(nproc) cores, $(date -u +%H:%M:%S) UTC)"

    t0="$(now)"
    build_rc=0
    (cd "$run/src" && cargo test --workspace --no-run "${extra[@]}" \
        --message-format=json-render-diagnostics >"$logs/build.json" 2>"$logs/build.log") ||
        build_rc=$?
    t1="$(now)"
    # executable -> package/target (kind), for naming the binaries in the test log.
    python3 - "$logs/build.json" >"$logs/binaries.tsv" <<'EOF' || true
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        pkg = m["manifest_path"].rstrip("/").split("/")[-2]
        kind = m["target"]["kind"][0]
        tgt = m["target"]["name"]
        label = f"{pkg} ({kind})" if kind in ("lib", "bin") else f"{pkg}/{kind}s/{tgt}"
        print(f"{m['executable']}\t{label}")
EOF
    nbin="$(wc -l <"$logs/binaries.tsv")"
    compile_s="$(secs "$t0" "$t1")"
    echo "compile: ${compile_s}s (cargo test --workspace --no-run; $nbin test binaries; exit $build_rc)"

    test_rc=0
    test_s=0
    if [ "$build_rc" -eq 0 ]; then
        t2="$(now)"
        (cd "$run/src" && cargo test --workspace "${extra[@]}" >"$logs/test.log" 2>&1) || test_rc=$?
        t3="$(now)"
        test_s="$(secs "$t2" "$t3")"
        echo "test:    ${test_s}s (cargo test --workspace; exit $test_rc; load now $(cut -d' ' -f1-3 /proc/loadavg))"
        parse_log "$logs/test.log" "$logs/binaries.tsv" >"$logs/parsed.txt"
        grep '^FAIL ' "$logs/parsed.txt" | sed 's/^FAIL /  failed: /' || true
        if [ "$test_rc" -ne 0 ] && [[ " ${extra[*]} " != *" --no-fail-fast "* ]]; then
            echo "  (cargo stops at the first failing test binary: the binaries after it did not run;"
            echo "   FRESH_TEST_ARGS=--no-fail-fast runs them all)"
        fi
        if [ "$test_rc" -ne 0 ] && ! grep -q '^FAIL ' "$logs/parsed.txt"; then
            echo "  failed without a test name; the end of $logs/test.log:"
            tail -n 15 "$logs/test.log" | sed 's/^/    /'
        fi
        echo "  slowest test binaries (libtest's own time):"
        grep '^TIME ' "$logs/parsed.txt" | sort -k2,2 -rn | head -n 10 |
            awk '{ t = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); printf "    %7.1fs  %s\n", t, $0 }'
    else
        echo "  the build failed; its errors (all in $logs/build.log):"
        grep -A 6 '^error' "$logs/build.log" | head -n 40 | sed 's/^/    /'
    fi

    kill "$sampler" 2>/dev/null || true
    least="$(cat "$logs/least-free-kb" 2>/dev/null || echo "$free0")"
    used_gb="$(awk -v a="$free0" -v b="$least" 'BEGIN { printf "%.1f", (a - b) / 1048576 }')"
    echo "disk:    ${used_gb} GB used at most ($(awk -v a="$free0" 'BEGIN { printf "%.1f", a / 1048576 }') GB free at the start)"
    # Leftovers of dead processes only (never --all: the machine's other containers stay).
    ahe="$CARGO_TARGET_DIR/debug/ahe"
    if [ -x "$ahe" ]; then
        "$ahe" sandbox reap >"$logs/reap.log" 2>&1 || true
        sed 's/^/  /' "$logs/reap.log"
    fi
    left="$(find "$TMPDIR" -maxdepth 1 -name 'ahe-local-*' | wc -l)"
    [ "$left" -eq 0 ] || echo "  $left ahe-local-* dir(s) left in TMPDIR"
    if [ "${FRESH_TEST_KEEP:-0}" != 1 ]; then
        rm -rf "$run" 2>/dev/null || echo "  could not remove all of $run"
    fi

    status=ok
    if [ "$build_rc" -ne 0 ]; then
        status="FAILED (build)"
    elif [ "$test_rc" -ne 0 ]; then
        status="FAILED (tests)"
    fi
    [ "$status" = ok ] || fails=$((fails + 1))
    nfail=0
    [ ! -f "$logs/parsed.txt" ] || nfail="$(grep -c '^FAIL ' "$logs/parsed.txt" || true)"
    summary+=("run $i: $status  compile ${compile_s}s  test ${test_s}s  binaries $nbin  failed tests $nfail  disk ${used_gb} GB  (load at start $load)")
done

echo
echo "=== summary: $sha, $n run(s), $fails failed"
printf '%s\n' "${summary[@]}"
for i in $(seq 1 "$n"); do
    [ ! -f "$out/run-$i/parsed.txt" ] || grep '^FAIL ' "$out/run-$i/parsed.txt" | sed "s/^FAIL /  run $i: /" || true
done
echo "logs: $out"
[ "$fails" -eq 0 ]
