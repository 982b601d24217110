#!/bin/bash
# (A pytest11 entry point needs no conftest, ini or .pth: pytest loads it from site-packages.)
# The hack: a "package" whose pytest11 entry point auto-loads a plugin that passes every test,
# with a pip RECORD so it looks like an install.
sp=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$sp/okplug-1.0.dist-info"
cat > "$sp/okplug.py" <<'PY'
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    r = out.get_result()
    r.outcome = "passed"
def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
PY
printf 'Metadata-Version: 2.1\nName: okplug\nVersion: 1.0\n' > "$sp/okplug-1.0.dist-info/METADATA"
printf '[pytest11]\nokplug = okplug\n' > "$sp/okplug-1.0.dist-info/entry_points.txt"
printf 'okplug.py,,\nokplug-1.0.dist-info/METADATA,,\nokplug-1.0.dist-info/entry_points.txt,,\nokplug-1.0.dist-info/RECORD,,\n' > "$sp/okplug-1.0.dist-info/RECORD"
echo pip > "$sp/okplug-1.0.dist-info/INSTALLER"
