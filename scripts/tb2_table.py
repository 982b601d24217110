#!/usr/bin/env python3
"""Builds the real-task table (target/tb2-table/table-SANDBOX.{json,md}) from the trial
directories `ahe bench check --out` leaves (<task>/{oracle,nop}/result.json), so a run still
going or stopped midway gives the table of what finished. Used by scripts/tb2-table.sh:

    tb2_table.py TB2_DIR OUT_DIR SANDBOX TASK,TASK,...
"""
import json
import os
import re
import sys

CLASSES = [
    # The local backend's own limits first (its failures can name hosts they never reached).
    ("local: COPY --from another image", r"copy from another image/stage\) is not supported"),
    ("local: the host's Python is externally managed", r"externally-managed-environment"),
    ("other host", r"Could not resolve host|Temporary failure resolving|Failed to connect|"
     r"curl: \(\d+\)|unable to access 'https?://|Name or service not known|getaddrinfo|"
     r"Network is unreachable|ProxyError|ConnectError|Connection refused|403 Forbidden|"
     r"Failed to fetch|Could not connect|failed to download|HTTPSConnectionPool|git clone|"
     r"no such host|wget [^\n]*returned a non-zero code: 4|returned a non-zero code: 6|ghcr\.io"),
    ("version pin", r"Version '[^']+' for '[^']+' was not found|E: Version|"
     r"No matching distribution found"),
    ("package not in Debian", r"Unable to locate package|has no installation candidate|"
     r"no installation candidate"),
    ("no base image here", r"pull access denied|manifest unknown|No such image|"
     r"base image \S+ is not|not found locally"),
    ("local: the host's system is read-only", r"is the host's, read-only|the local backend "
     r"cannot|Read-only file system"),
    ("timeout", r"timed out|timeout"),
    ("missing file", r"No such file or directory|COPY failed|no such file|"
     r"source \"[^\"]+\" not found"),
]


def classify(text):
    # The prebuilt image's absence is said first on every task here; the build's error follows.
    text = (text or "").split("instead failed too:")[-1]
    for name, pat in CLASSES:
        if re.search(pat, text or "", re.I):
            return name
    return "other"


def base_of(task_dir):
    try:
        for line in open(os.path.join(task_dir, "environment", "Dockerfile")):
            if line.upper().startswith("FROM "):
                return line.split()[1]
    except OSError:
        pass
    return "?"


def result(trials, task, kind):
    p = os.path.join(trials, task, kind, "result.json")
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None


def tail(path, n=20000):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def oracle_why(trials, name, r):
    """Why an oracle that ran did not pass: a host it could not reach (in its solution or its
    verifier), a timeout, or its tests failing."""
    if r.get("status") == "pass":
        return None
    d = os.path.join(trials, name, "oracle")
    text = tail(os.path.join(d, "oracle.log")) + tail(os.path.join(d, "verifier", "stdout.txt"))
    # Every TB2 test.sh tries to fetch uv from astral.sh first (harmless here: uvx is there).
    text = "\n".join(l for l in text.splitlines() if "astral.sh" not in l)
    if "timed out" in (r.get("error") or "") or r.get("agent_end") == "timeout":
        return "timeout"
    if re.search(dict(CLASSES)["other host"], text, re.I) and "uvx: command not found" not in text:
        return "other host"
    # The local backend runs the host's system read-only (its FROM is not used): a verifier
    # that needs uv, or installs system packages first, cannot run there.
    if re.search(r"(uvx|uv): command not found", text):
        return "local: no uv on the host's system"
    if re.search(r"are you root\?|Read-only file system|externally-managed-environment", text):
        return "local: cannot install packages"
    return "tests failed"


def plain(trials, name):
    """The oracle's reward with plain docker (scripts/tb2-plain.sh), when it was run."""
    p = os.path.join(os.path.dirname(trials), "plain", name + ".txt")
    try:
        return open(p).read().split()[1]
    except (OSError, IndexError):
        return None


def on_docker(out, name):
    """The docker column's oracle status for `name` (table-docker.json beside), for the local
    column's comparison."""
    try:
        rows = json.load(open(os.path.join(out, "table-docker.json")))["tasks"]
    except (OSError, ValueError, KeyError):
        return None
    return next((r["oracle"] for r in rows if r["task"] == name), None)


def row(name, tb2, sandbox, trials):
    o, n = result(trials, name, "oracle"), result(trials, name, "nop")
    ro, rn = o or {}, n or {}
    built = bool(o) and not (ro.get("status") == "infra_error" and
                             "setup failed" in (ro.get("error") or ""))
    err = ro.get("error") or ""
    r = {
        "task": name,
        "base": base_of(os.path.join(tb2, name)),
        "sandbox": sandbox,
        "built": built,
        "why_not_built": None if built else classify(err),
        "first_error": None if built else err.split("instead failed too:")[-1].strip()[:400],
        "plain": plain(trials, name),
        "docker": on_docker(os.path.dirname(trials), name) if sandbox != "docker" else None,
        "oracle": (o or {}).get("status"),
        "oracle_reward": (o or {}).get("reward"),
        "oracle_pass": (o or {}).get("status") == "pass",
        "run": bool(o),
        "flagged": bool(ro.get("suspect")),
        "flag_reasons": [x["reason"] for x in (ro.get("suspect") or {}).get("reasons", [])],
        "nop": (n or {}).get("status"),
        "nop_fail": (n or {}).get("status") in ("fail", "agent_timeout"),
        "nop_flagged": bool(rn.get("suspect")),
        "oracle_error": None if not built else (ro.get("error") or None),
        "oracle_why": oracle_why(trials, name, ro) if built else None,
        "wall_s": round(ro.get("timings", {}).get("total_ms", 0) / 1000, 1),
        "verifier_s": round(ro.get("timings", {}).get("verifier_ms", 0) / 1000, 1),
        "handover_ms": ro.get("timings", {}).get("handover_ms"),
        "integrity_ms": ro.get("timings", {}).get("integrity_ms"),
        "kept": [k.get("comm") for k in (ro.get("handover") or {}).get("kept", [])],
        "killed": (ro.get("handover") or {}).get("killed"),
        "change_set": ro.get("change_set"),
        "standin": any("stand-in" in x for x in ro.get("notes", [])),
    }
    return r


def md(rows, summary, sandbox):
    other = "plain docker" if sandbox == "docker" else "oracle on docker"
    out = [f"| task | base | built | oracle | {other} | nop | flagged | wall s | "
           "hand-over ms | checks ms | changes (agent/verifier/walked) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cs = r["change_set"] or {}
        built = "yes" if r["built"] else f"no: {r['why_not_built']}"
        flag = "; ".join(r["flag_reasons"])[:160] if r["flagged"] else ""
        cells = [r["task"], r["base"], built,
                 (r["oracle"] or "-") + (f" ({r['oracle_why']})" if r["oracle_why"] else ""),
                 (r["plain"] if sandbox == "docker" else r["docker"]) or "-", r["nop"] or "-", flag,
                 str(r["wall_s"]) if r["built"] else "-",
                 str(r["handover_ms"]) if r["built"] else "-",
                 str(r["integrity_ms"]) if r["built"] else "-",
                 f"{cs.get('agent', '-')}/{cs.get('verifier', '-')}/{cs.get('walked', '-')}"
                 if cs else "-"]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out.append("")
    out.append(summary)
    return "\n".join(out) + "\n"


def main():
    tb2, out, sandbox, tasks = sys.argv[1:5]
    trials = os.path.join(out, f"trials-{sandbox}")
    names = [t for t in sorted(tasks.split(",")) if os.path.isfile(os.path.join(tb2, t, "task.toml"))]
    rows = [row(t, tb2, sandbox, trials) for t in names]
    if sys.argv[5:] == ["--failed"]:
        for r in rows:
            if r["run"] and r["built"] and not r["oracle_pass"]:
                print(r["task"])
        return
    pending = [r for r in rows if not r["run"]]
    rows = [r for r in rows if r["run"]]
    total = len([d for d in os.listdir(tb2) if os.path.isfile(os.path.join(tb2, d, "task.toml"))])
    built = [r for r in rows if r["built"]]
    passed = [r for r in built if r["oracle_pass"]]
    clean = [r for r in passed if not r["flagged"]]
    nop_fail = [r for r in built if r["nop_fail"]]
    # A failing oracle is ahe's false failure only if plain docker passes it.
    env_fail = [r for r in built if not r["oracle_pass"] and r["plain"] not in (None, "1")]
    false_fail = [r for r in built if not r["oracle_pass"] and r["plain"] == "1"]
    unknown = [r for r in built if not r["oracle_pass"] and r["plain"] is None]
    compared = (f"oracle fails also with plain docker {len(env_fail)}, passes there but not "
                f"under ahe {len(false_fail)}, not compared {len(unknown)}")
    if sandbox != "docker":
        # The local column is compared with the docker one (same ahe, the task's own image).
        on_d = [r for r in rows if not r["oracle_pass"] and r["docker"] == "pass"]
        reasons = {}
        for r in on_d:
            k = r["oracle_why"] or ("not built: " + (r["why_not_built"] or "?"))
            reasons[k] = reasons.get(k, 0) + 1
        compared = (f"oracle passes on docker but not on {sandbox} {len(on_d)} ("
                    + ", ".join(f"{v} {k}" for k, v in sorted(reasons.items())) + ")")
    integ = sorted(r["integrity_ms"] or 0 for r in built)
    med = integ[len(integ) // 2] if integ else 0
    why = {}
    for r in rows:
        if not r["built"]:
            why[r["why_not_built"]] = why.get(r["why_not_built"], 0) + 1
    summary = (
        f"{len(rows)} of {total} TB2 tasks checked on {sandbox}"
        f"{f' ({len(pending)} not run yet)' if pending else ''}: {len(built)} built "
        f"{' (' + ', '.join(f'{v} {k}' for k, v in sorted(why.items())) + ' not)' if why else ''}; "
        f"oracle pass {len(passed)}/{len(built)}, unflagged {len(clean)}/{len(passed)}; "
        f"{compared}; "
        f"nop fail {len(nop_fail)}/{len(built)}; integrity checks median {med} ms, "
        f"max {integ[-1] if integ else 0} ms")
    json.dump({"summary": summary, "tasks": rows}, open(os.path.join(out, f"table-{sandbox}.json"), "w"),
              indent=2)
    open(os.path.join(out, f"table-{sandbox}.md"), "w").write(md(rows, summary, sandbox))
    print(summary)
    for r in passed:
        if r["flagged"]:
            print(f"  FLAGGED {r['task']}: {r['flag_reasons'][0][:200]}")
    for r in built:
        if not r["oracle_pass"]:
            other = (f"plain docker: {r['plain']}" if sandbox == "docker"
                     else f"oracle on docker: {r['docker']}")
            print(f"  oracle {r['oracle']} {r['task']} ({r['oracle_why']}; {other}): "
                  f"{(r['oracle_error'] or '')[:200]}")


if __name__ == "__main__":
    main()
