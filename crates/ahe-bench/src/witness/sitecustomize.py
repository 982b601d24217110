"""ahe's witness of every Python process the verifier starts (found first on PYTHONPATH while
the tests run; then the image's own sitecustomize, if any, runs as usual).

It records, one JSON line per event into $AHE_WITNESS_DIR, how the process ends when it is not
a plain return: an uncaught exception, a sys.exit, who called os._exit and with which status. Nothing the program sees changes. See docs/reward-integrity.md, "The witness".
"""

import os
import sys


def _install():
    out = os.environ.get("AHE_WITNESS_DIR", "")
    if not out:
        return
    real_exit = os._exit
    write, open_, close = os.write, os.open, os.close

    def emit(ev, **kw):
        # Imported here, not at start-up: a process that ends normally pays nothing.
        import json
        import time

        pid = os.getpid()  # a forked child writes its own record
        kw.update(ev=ev, pid=pid, t=round(time.time(), 3), argv=list(sys.argv))
        try:
            fd = open_(os.path.join(out, "witness.%d.jsonl" % pid),
                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                write(fd, (json.dumps(kw, default=str) + "\n").encode())
            finally:
                close(fd)
        except OSError:
            pass

    def exit_witness(status):
        f = sys._getframe(0).f_back
        who = ("an exit handler (no Python caller: atexit.register(os._exit, ...))"
               if f is None else "%s:%d" % (f.f_code.co_filename, f.f_lineno))
        emit("os_exit", status=status, caller=who)
        real_exit(status)

    os._exit = exit_witness
    try:
        import posix

        posix._exit = exit_witness
    except ImportError:
        pass
    hook = sys.excepthook

    def excepthook(tp, value, tb):
        emit("uncaught", exc=tp.__name__)
        hook(tp, value, tb)

    sys.excepthook = excepthook
    real_sys_exit = sys.exit

    def sys_exit(code=None):
        emit("sys_exit", code=code if isinstance(code, int) or code is None else 1)
        real_sys_exit(code)

    sys.exit = sys_exit
    sys.modules["_ahe_witness_emit"] = emit


_install()
del _install

# The image's own sitecustomize, as if this one were not here.
_here = os.path.dirname(os.path.abspath(__file__))
for _d in sys.path:
    if not _d or os.path.abspath(_d) == _here:
        continue
    _p = os.path.join(_d, "sitecustomize.py")
    if os.path.isfile(_p):
        import importlib.util

        _spec = importlib.util.spec_from_file_location("sitecustomize", _p)
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules["sitecustomize"] = _mod
        try:
            _spec.loader.exec_module(_mod)
        except Exception:
            pass
        break
