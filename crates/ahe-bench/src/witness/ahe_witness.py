"""ahe's witness of a verifier's pytest run (loaded by pytest through PYTEST_PLUGINS).

It writes what really happened, one JSON object per line, into $AHE_WITNESS_DIR (a directory
of a fresh random name made after the agent's processes ended): each test's outcome as the
report says and whether its call raised (seen twice: by pytest's CallInfo and around the
test function itself), the session's exit status and counts, whether the session reached
its end, who called os._exit, and whether pytest's own objects were replaced during the run.
It changes nothing the tests see. ahe compares this with the reward (see
docs/reward-integrity.md, "The witness").
"""

import json
import os
import sys
import time

_DIR = os.environ.get("AHE_WITNESS_DIR", "")
_real_exit = os._exit
_write = os.write
_open = os.open


def _emit(ev, **kw):
    if not _DIR:
        return
    kw["ev"] = ev
    kw["pid"] = os.getpid()  # a forked child writes its own record
    kw["t"] = round(time.time(), 3)
    line = (json.dumps(kw, default=str) + "\n").encode()
    try:
        fd = _open(os.path.join(_DIR, "witness.%d.jsonl" % kw["pid"]),
                   os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def _caller():
    f = sys._getframe(1).f_back  # who called os._exit
    if f is None:
        return "an exit handler (no Python caller: atexit.register(os._exit, ...))"
    return "%s:%d" % (f.f_code.co_filename, f.f_lineno)


def _exit_witness(status):
    _emit("os_exit", status=status, caller=_caller())
    _real_exit(status)


if "_ahe_witness_emit" in sys.modules:
    # The witness's sitecustomize already watches how this process ends.
    _emit = sys.modules["_ahe_witness_emit"]  # noqa: F811
else:
    os._exit = _exit_witness
    try:
        import posix

        posix._exit = _exit_witness
    except ImportError:
        pass

_emit("loaded", argv=sys.argv, executable=sys.executable)

# pytest's objects that decide an outcome; replaced ones are reported at the end.
_WATCHED = [
    ("_pytest.runner", "CallInfo", "from_call"),
    ("_pytest.runner", None, "call_and_report"),
    ("_pytest.runner", None, "pytest_runtest_makereport"),
    ("_pytest.reports", "TestReport", "from_item_and_call"),
    ("_pytest.reports", "TestReport", "__init__"),
    ("_pytest.reports", "BaseReport", "passed"),
    ("_pytest.reports", "BaseReport", "failed"),
    ("_pytest.python", "Function", "runtest"),
    ("_pytest.python", None, "pytest_pyfunc_call"),
    ("_pytest.main", None, "wrap_session"),
    ("_pytest.outcomes", None, "fail"),
    ("_pytest.terminal", "TerminalReporter", "pytest_runtest_logreport"),
]


def _identities():
    out = {}
    for mod, cls, name in _WATCHED:
        m = sys.modules.get(mod)
        if m is None:
            continue
        holder = getattr(m, cls, None) if cls else m
        if holder is None:
            continue
        obj = holder.__dict__.get(name) if cls else getattr(holder, name, None)
        key = "%s.%s%s" % (mod, cls + "." if cls else "", name)
        out[key] = id(obj)
    return out


_BEFORE = {}


def pytest_configure(config):
    import pytest  # noqa: F401  (the module pytest runs with)

    _BEFORE.update(_identities())
    _emit("configure", pytest=getattr(sys.modules.get("pytest"), "__version__", "?"),
          args=[str(a) for a in getattr(config, "args", [])])


import pytest as _pytest_mod  # noqa: E402  (pytest imports this plugin itself)


@_pytest_mod.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    outcome = yield
    exc = outcome.excinfo
    _emit("func", nodeid=pyfuncitem.nodeid, raised=exc[0].__name__ if exc else None)


@_pytest_mod.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    try:
        report = outcome.get_result()
    except BaseException:
        return
    exc = call.excinfo.typename if call.excinfo is not None else None
    _emit("report", nodeid=item.nodeid, when=call.when, outcome=report.outcome,
          raised=exc, xfail=hasattr(report, "wasxfail"))


@_pytest_mod.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    yield
    _emit("finish", exitstatus=int(exitstatus), failed=session.testsfailed,
          collected=session.testscollected)


def pytest_unconfigure(config):
    now = _identities()
    replaced = sorted(k for k, v in _BEFORE.items() if now.get(k) != v)
    _emit("unconfigure", replaced=replaced,
          os_exit_replaced=os._exit is not _exit_witness)
