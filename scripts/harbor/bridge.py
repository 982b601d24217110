#!/usr/bin/env python3
"""ahe's bridge to Harbor environments (`[sandbox] backend = "harbor"`).

Run with the Python of a Harbor venv (scripts/setup-harbor.sh). One bridge serves many
concurrent environments, each created by Harbor's own environment classes
(`EnvironmentFactory`), so a trial's sandbox is built, pulled, run and deleted exactly as
`harbor run --env NAME` would.

Protocol: JSON lines. ahe writes one request per line on stdin; the bridge answers each with
one line on stdout carrying the same `id` (answers may come in any order; requests run
concurrently). Nothing else is ever written to stdout (Harbor's logs go to stderr).

  request                                               answer (besides "id" and "ok": true)
  {"op": "hello"}                                       {"harbor": VERSION, "environments": [...]}
  {"op": "check", "environment": "docker", "options": {...}}           {} (Harbor's preflight:
                                                         the SDK, options, credentials)
  {"op": "start", "session": S, "environment": "docker",
   "options": {...}, "environment_dir": DIR|null, "docker_image": IMG|null,
   "cpus": N|null, "memory_mb": N|null, "storage_mb": N|null, "allow_internet": bool,
   "env": {...}, "build_timeout_sec": N|null, "trial_dir": DIR, "record": FILE|null,
   "workdir": DIR|null (the image's, when ahe knows it),
   "fresh": bool (docker: ahe found no container of the project),
   "engine": bool (docker: ahe runs the start's own commands through the Engine API)}
                                                        {"workdir": "/app", "notes": [...],
                                                         "then": [{"command", "user"}]: with
                                                         "engine", what ahe runs next}
  {"op": "exec", "session": S, "command": "...", "cwd": DIR|null, "env": {...},
   "timeout_sec": N|null, "stdin_b64": B64|null, "user": NAME|null}      {"exit_code": N|null, "output": "...",
                                                         "timed_out": bool}
  {"op": "put", "session": S, "src": HOST_PATH, "dest": PATH}          {}
  {"op": "get", "session": S, "src": PATH, "tar": HOST_PATH}           {} (a tar of src,
                                                         its first component src's basename)
  {"op": "stop", "session": S, "delete": true}                         {}
  {"op": "delete", <the fields of a start>}             {} (deletes an environment an earlier,
                                                         dead bridge started: `ahe sandbox reap`)
  {"op": "cancel", "target": ID}                        (no answer: cancels request ID, which
                                                         then answers {"cancelled": true})

`record` names ahe's record of the live environment: the bridge removes it once the
environment is deleted. A failure answers {"ok": false, "kind": "setup"|"backend"|"protocol", "error": MESSAGE}, the
message being Harbor's or the provider's. Every exec carries AHE_EXEC_ID=<uuid> in its
environment; a timed-out or cancelled exec kills every process of the environment that
carries its id. With AHE_HARBOR_PROFILE set, each request's wall time goes to stderr
(`profile OP SESSION MS`). On end of input or SIGTERM the bridge stops (and deletes) every environment
it started, then exits; SIGINT is ignored (Ctrl-C is ahe's to handle).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import io
import json
import logging
import os
import shlex
import signal
import sys
import tarfile
import tempfile
import time
import traceback
import uuid
from pathlib import Path

# The protocol owns the real stdout; anything else printing goes to stderr.
_PROTO = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

from harbor.environments.factory import EnvironmentFactory  # noqa: E402
from harbor.models.environment_type import EnvironmentType  # noqa: E402
from harbor.models.task.config import EnvironmentConfig, NetworkMode, NetworkPolicy  # noqa: E402
from harbor.models.trial.paths import TrialPaths  # noqa: E402

# Kills every process whose environment carries one exec's marker (POSIX sh, busybox too).
KILL_MARKED = (
    'for p in /proc/[0-9]*; do '
    'if tr "\\0" "\\n" < "$p/environ" 2>/dev/null | grep -qx "AHE_EXEC_ID={id}"; then '
    'kill -9 "${{p#/proc/}}" 2>/dev/null; fi; done; true'
)


# AHE_HARBOR_PROFILE=1: one `profile OP SESSION MS` line per request on stderr (the log).
PROFILE = bool(os.environ.get("AHE_HARBOR_PROFILE"))


# Commands up to this size carry their stdin (base64) inline: one argument of the exec must
# stay under Linux's 128 KiB per-argument limit.
INLINE_MAX = 96 * 1024
# Archives up to this size come back from `get` in the exec's output (base64).
GET_INLINE_MAX = 8 * 1024 * 1024
# Where ahe puts its own static busybox and the outputs of its in-sandbox checks
# (ahe_sandbox::INSIDE_PREFIX).
OWN_PREFIX = "/.ahe-bb-"
# The line before that base64.
TAR_MARK = "AHE-TAR-BASE64"
# The exit code of an inline command that found no base64 in the image.
NO_BASE64 = 125


def stdin_inline(command: str, b64: str, path: str) -> str:
    """`command` run with the bytes of `b64` as its stdin, in one exec: they are decoded to
    `path`, which is opened as stdin and removed before the command starts."""
    return (
        f"command -v base64 >/dev/null 2>&1 || {{ echo AHE-NO-BASE64; exit {NO_BASE64}; }}; "
        f"printf %s {b64} | base64 -d > {path} && "
        f"{{ rm -f {path}; exec bash -c {shlex.quote(command)}; }} < {path}"
    )


# Files and directories whose archive is at most this big go up inline (see INLINE_MAX).
PUT_INLINE_MAX = 64 * 1024


def small_tar(src: Path) -> bytes | None:
    """The archive `put` sends for `src` (a directory: its contents; a file: the file),
    owners reset to root as Harbor's own tar upload does; None when it is too big."""
    total = 0
    members = [src] if not src.is_dir() else sorted(src.rglob("*"))
    for p in members:
        total += p.lstat().st_size if p.is_file() and not p.is_symlink() else 0
        if total > PUT_INLINE_MAX:
            return None

    def root(info):
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in members:
            arcname = src.name if p == src else p.relative_to(src).as_posix()
            tar.add(p, arcname=arcname, recursive=False, filter=root)
    data = buf.getvalue()
    return data if len(data) <= PUT_INLINE_MAX else None


def put_inline(src: Path, dest: str, tar: bytes) -> str:
    """One command that unpacks `tar` (from `small_tar(src)`) as `put` of `src` to `dest`
    would copy it: a directory's contents into `dest`; a file into `dest` when that is a
    directory (or ends in /), else as `dest`."""
    b64 = base64.b64encode(tar).decode()
    q = shlex.quote
    check = f"command -v base64 >/dev/null 2>&1 || {{ echo AHE-NO-BASE64; exit {NO_BASE64}; }}; "
    unpack = f"printf %s {b64} | base64 -d | tar -xf - -C"
    if src.is_dir():
        return f"{check}mkdir -p {q(dest)} && {unpack} {q(dest)}"
    return (
        f"{check}d={q(dest)}; n={q(src.name)}; "
        'if [ -d "$d" ] || [ "${d%/}" != "$d" ]; then '
        f'mkdir -p "$d" && {unpack} "$d"; '
        'else p=$(dirname "$d"); mkdir -p "$p" && t=$(mktemp -d "$p/.ahe-put-XXXXXX") && '
        f'{unpack} "$t" && mv -f "$t/$n" "$d" && rmdir "$t"; fi'
    )


# Harbor's `main` service runs `sh -c "sleep infinity"` as PID 1, which ignores SIGTERM, so
# every `docker compose down` waited out the 10 s grace period before its SIGKILL. This
# overlay (through Harbor's own extra_docker_compose) sends SIGKILL at once: the same end.
# It also gives the container CAP_WAKE_ALARM, which ahe's processes hold and the agent's shell
# drops (ahe's ptrace guard: a server the agent leaves cannot trace the verifier).
FAST_STOP = "services:\n  main:\n    stop_signal: SIGKILL\n    cap_add: [WAKE_ALARM]\n"


@functools.cache
def fast_stop_overlay() -> str:
    """The path of the FAST_STOP compose overlay, next to this script (ahe's state dir)."""
    path = Path(__file__).resolve().parent / "docker-compose-ahe-fast-stop.yaml"
    if not path.is_file() or path.read_text() != FAST_STOP:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(FAST_STOP)
        os.replace(tmp, path)
    return str(path)


def ask_daemon_os_once() -> None:
    """Harbor's docker environment asks `docker info` for the daemon's OS in every start,
    with a blocking call that stalls every other environment of this bridge meanwhile; the
    answer cannot change while the bridge runs, so it is asked once."""
    try:
        from harbor.environments.docker.docker import DockerEnvironment
    except ImportError:
        return
    ask = getattr(DockerEnvironment, "_detect_daemon_os", None)
    if ask is not None and hasattr(ask, "__func__"):
        DockerEnvironment._detect_daemon_os = classmethod(functools.cache(ask.__func__))


def thin_docker_start() -> None:
    """Three steps of Harbor's docker start that cannot find anything to do in ahe's
    environments are skipped: the `docker compose down --remove-orphans` before `up` when
    ahe found no container of the project on the engine (`"fresh": true` in the start: its
    session names are new, but a killed ahe's could be left); the `docker inspect` of the
    image's OS after the first start from that image (ahe's task images are named by their
    content); and `up`'s `--wait` when the project is one service from an image without a
    HEALTHCHECK and no compose file of the user's (`"wait": false`)."""
    try:
        from harbor.environments.docker.docker import DockerEnvironment
    except ImportError:
        return
    run = getattr(DockerEnvironment, "_run_docker_compose_command", None)
    if run is not None:

        @functools.wraps(run)
        async def run_unless_fresh_down(self, command, *args, **kwargs):
            if command == ["down", "--remove-orphans"] and getattr(self, "_ahe_fresh", False):
                self._ahe_fresh = False  # once: a later down (the delete) runs
                return None  # start ignores this call's result
            if command[:1] == ["up"] and getattr(self, "_ahe_nowait", False):
                # Nothing to wait for (one service, no healthcheck): `up --detach` returns
                # once the container runs; `--wait` would poll that in 0.5 s steps.
                command = [c for c in command if c != "--wait"]
            return await run(self, command, *args, **kwargs)

        DockerEnvironment._run_docker_compose_command = run_unless_fresh_down
    validate = getattr(DockerEnvironment, "_validate_image_os", None)
    if validate is not None:
        checked: set = set()

        @functools.wraps(validate)
        async def validate_once(self, image_name):
            if image_name in checked:
                return
            await validate(self, image_name)
            checked.add(image_name)

        DockerEnvironment._validate_image_os = validate_once


# How long a cancelled start may take to finish before its environment is deleted anyway.
SETTLE_SEC = 120.0


async def settle(task: asyncio.Future, cancel: bool, within: float) -> None:
    """Waits (at most `within` seconds) for `task` to end, cancelled first when `cancel`;
    its outcome is dropped."""
    if cancel:
        task.cancel()
    await asyncio.wait({task}, timeout=within)
    if task.done() and not task.cancelled():
        task.exception()


class Failure(Exception):
    """A request that failed: `kind` says whose fault (setup: the environment definition or
    the provider refused it; backend: the provider failed while running)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Bridge:
    def __init__(self) -> None:
        self.envs: dict = {}
        self.stopping: dict = {}
        self.starting: dict = {}
        self.records: dict = {}
        self.tasks: dict = {}
        self.write_lock = asyncio.Lock()

    async def answer(self, msg: dict) -> None:
        async with self.write_lock:
            try:
                _PROTO.write(json.dumps(msg) + "\n")
                _PROTO.flush()
            except (BrokenPipeError, ValueError):
                pass  # ahe is gone: the shutdown still deletes every environment

    def env(self, session: str):
        e = self.envs.get(session)
        if e is None:
            raise Failure("backend", f"no environment {session!r} (stopped or never started)")
        return e

    async def op_hello(self, req: dict) -> dict:
        import importlib.metadata as md

        return {
            "harbor": md.version("harbor"),
            "environments": EnvironmentFactory.registered_names(),
        }

    async def op_check(self, req: dict) -> dict:
        """Loads the environment class (its SDK) and runs Harbor's preflight for it (options,
        credentials, the docker daemon), without creating anything."""
        name = req.get("environment") or "docker"
        try:
            etype = EnvironmentType(name)
            cls = EnvironmentFactory.get_environment_class(etype)
            cls.preflight(kwargs=dict(req.get("options") or {}))
        except BaseException as e:  # ImportError (no extra), ValueError, SystemExit
            raise Failure("setup", f"harbor {name}: {type(e).__name__}: {e}")
        return {}

    def make(self, req: dict):
        """The Harbor environment object a start request describes (nothing started)."""
        session = req["session"]
        name = req.get("environment") or "docker"
        try:
            etype = EnvironmentType(name)
        except ValueError:
            raise Failure(
                "setup",
                f"environment {name!r} is not one Harbor offers; use one of "
                + ", ".join(EnvironmentFactory.registered_names()),
            )
        env_dir = req.get("environment_dir")
        if not env_dir:
            env_dir = tempfile.mkdtemp(prefix="ahe-harbor-env-")
        trial_dir = Path(req.get("trial_dir") or tempfile.mkdtemp(prefix="ahe-harbor-trial-"))
        paths = TrialPaths(trial_dir=trial_dir)
        paths.mkdir()
        cfg = EnvironmentConfig(
            docker_image=req.get("docker_image"),
            cpus=req.get("cpus"),
            memory_mb=req.get("memory_mb"),
            storage_mb=req.get("storage_mb"),
            allow_internet=bool(req.get("allow_internet", True)),
            build_timeout_sec=req.get("build_timeout_sec") or 600.0,
        )
        notes = []
        kwargs = dict(req.get("options") or {})
        extra = list(kwargs.pop("extra_docker_compose", []) or [])
        policy = NetworkPolicy(network_mode=NetworkMode.PUBLIC)
        if etype == EnvironmentType.DOCKER:
            extra.append(fast_stop_overlay())
        if not cfg.allow_internet:
            if etype == EnvironmentType.DOCKER:
                # Harbor's own no-network compose overlay: the main service has
                # network_mode none (its egress sidecar needs images from Docker Hub).
                import harbor.environments.docker as hd

                extra.append(str(Path(hd.__file__).parent / "docker-compose-no-network.yaml"))
                notes.append("no network: Harbor's docker-compose-no-network.yaml overlay")
            else:
                policy = NetworkPolicy(network_mode=NetworkMode.NO_NETWORK)
        try:
            env = EnvironmentFactory.create_environment(
                type=etype,
                environment_dir=Path(env_dir),
                environment_name=req.get("task") or session,
                session_id=session,
                trial_paths=paths,
                task_env_config=cfg,
                persistent_env=req.get("env") or None,
                network_policy=policy,
                extra_docker_compose=extra or None,
                **kwargs,
            )
        except Exception as e:  # bad options, missing SDK, unsupported policy
            raise Failure("setup", f"harbor {name}: {type(e).__name__}: {e}")
        return env, notes, cfg

    async def op_start(self, req: dict) -> dict:
        session = req["session"]
        name = req.get("environment") or "docker"
        env, notes, cfg = self.make(req)
        if req.get("fresh"):
            env._ahe_fresh = True
        if req.get("wait") is False and not (req.get("options") or {}).get("extra_docker_compose"):
            env._ahe_nowait = True
        then = []
        if req.get("engine") and hasattr(env, "_ensure_dirs_command"):
            # ahe runs the start's own `ensure_dirs` command (Harbor's, unchanged) through the
            # Engine API once the container is up: one `docker compose exec` fewer.
            async def ensure_dirs_later(dirs, *, chmod=True):
                if dirs:
                    user = env._reset_dirs_user() if chmod else None
                    then.append({"command": env._ensure_dirs_command(dirs, chmod=chmod),
                                 "user": user})
                return None

            env.ensure_dirs = ensure_dirs_later
        self.envs[session] = env
        if req.get("record"):
            self.records[session] = req["record"]
        timeout = float(cfg.build_timeout_sec) + 300.0
        start = asyncio.ensure_future(env.start(force_build=False))
        self.starting[session] = start
        try:
            await asyncio.wait_for(asyncio.shield(start), timeout)
        except asyncio.TimeoutError:
            await settle(start, cancel=True, within=10)
            await self.stop(session, True)
            raise Failure("setup", f"harbor {name}: start did not finish within {timeout:.0f} s")
        except asyncio.CancelledError:
            # Nobody waits for this environment any more: deleted (once its start is over,
            # see _stop; a second cancel does not stop that).
            await self.stop(session, True)
            raise
        except Exception as e:
            await self.stop(session, True)
            raise Failure("setup", f"harbor {name}: start failed: {type(e).__name__}: {e}")
        env.__dict__.pop("ensure_dirs", None)  # later calls: Harbor's own
        if req.get("workdir"):
            # ahe read it from the image it built: no exec needed.
            return {"workdir": req["workdir"], "notes": notes, "then": then}
        r = await env.exec("pwd", timeout_sec=60)
        workdir = (r.stdout or "").strip().splitlines()
        return {"workdir": workdir[-1] if workdir else "/", "notes": notes, "then": then}

    async def op_exec(self, req: dict, inline: bool = True) -> dict:
        env = self.env(req["session"])
        marker = uuid.uuid4().hex
        command = req["command"]
        stdin = req.get("stdin_b64")
        staged = None
        if inline and stdin is not None and len(stdin) + len(command) <= INLINE_MAX:
            # Small input rides in the command itself: one exec instead of three.
            command = stdin_inline(command, stdin, f"/tmp/.ahe-stdin-{marker}")
        elif stdin is not None:
            with tempfile.NamedTemporaryFile(delete=False, prefix="ahe-stdin-") as f:
                f.write(base64.b64decode(stdin))
            staged = f"/tmp/.ahe-stdin-{marker}"
            try:
                await env.upload_file(f.name, staged)
            finally:
                os.unlink(f.name)
            command = f"exec bash -c {shlex.quote(command)} < {staged}"
        exec_env = dict(req.get("env") or {})
        exec_env["AHE_EXEC_ID"] = marker
        timeout = req.get("timeout_sec")
        as_user = {"user": req["user"]} if req.get("user") is not None else {}
        run = asyncio.ensure_future(
            env.exec(command, cwd=req.get("cwd"), env=exec_env, **as_user)
        )
        try:
            r = await asyncio.wait_for(asyncio.shield(run), float(timeout) if timeout else None)
        except asyncio.TimeoutError:
            await asyncio.shield(self.end_exec(env, marker, run))
            return {"exit_code": None, "output": "", "timed_out": True}
        except asyncio.CancelledError:
            # Shielded: a second cancel (ahe's, then the shutdown's) does not cut it short.
            await asyncio.shield(self.end_exec(env, marker, run))
            raise
        except Exception as e:
            raise Failure("backend", f"exec: {type(e).__name__}: {e}")
        finally:
            if staged:
                asyncio.ensure_future(env.exec(f"rm -f {staged}", timeout_sec=30))
        out = (r.stdout or "") + (r.stderr or "")
        if inline and r.return_code == NO_BASE64 and out.strip() == "AHE-NO-BASE64":
            # No base64 in the image: the input goes up as a file instead.
            return await self.op_exec(req, inline=False)
        return {"exit_code": r.return_code, "output": out, "timed_out": False}

    async def end_exec(self, env, marker: str, run: asyncio.Future) -> None:
        """Kills the exec's processes until the exec itself has returned: a process the
        exec started only after a kill (its `docker compose exec` was still on its way in)
        is caught by the next kill, so nothing of a timed-out or cancelled exec runs on."""
        for _ in range(4):
            await self.kill_marked(env, marker)
            done, _ = await asyncio.wait({run}, timeout=2.5)
            if done:
                if not run.cancelled():
                    run.exception()  # retrieved: an exec that failed is not logged again
                return
        print(f"bridge: exec {marker} did not return after its kill; dropped", file=sys.stderr)
        run.cancel()

    async def kill_marked(self, env, marker: str) -> None:
        try:
            await asyncio.shield(env.exec(KILL_MARKED.format(id=marker), timeout_sec=30))
        except Exception as e:
            print(f"bridge: killing exec {marker}: {e}", file=sys.stderr)

    async def op_put(self, req: dict) -> dict:
        env = self.env(req["session"])
        src, dest = Path(req["src"]), req["dest"]
        try:
            tar = None if src.is_dir() else small_tar(src)
            if tar is not None:
                # A small file rides in one exec (else: a test, a mkdir and a copy; a
                # directory is one copy either way).
                r = await env.exec(put_inline(src, dest, tar), timeout_sec=600)
                out = (r.stdout or "") + (r.stderr or "")
                if r.return_code == 0:
                    return {}
                if not (r.return_code == NO_BASE64 and out.strip() == "AHE-NO-BASE64"):
                    raise Failure("backend", f"put {src} -> {dest}: {out.strip()}")
            if src.is_dir():
                await env.upload_dir(src, dest)
            else:
                if dest.endswith("/") or await env.is_dir(dest):
                    dest = dest.rstrip("/") + "/" + src.name
                parent = os.path.dirname(dest) or "/"
                await env.exec(f"mkdir -p {shlex.quote(parent)}", timeout_sec=60)
                await env.upload_file(src, dest)
        except Failure:
            raise
        except Exception as e:
            raise Failure("backend", f"put {src} -> {req['dest']}: {type(e).__name__}: {e}")
        return {}

    async def get_own(self, env, src: str, tar_path: str) -> dict:
        """ahe's own tool's outputs (under OWN_PREFIX) come back by Harbor's download (docker
        compose cp, or the provider's API), tarred here: no program of the sandbox (its `tar`,
        `base64`) touches them on the way."""
        base = os.path.basename(src)
        with tempfile.TemporaryDirectory(prefix="ahe-own-") as tmp:
            local = Path(tmp) / base
            try:
                if await env.is_dir(src):
                    await env.download_dir(src, local)
                else:
                    await env.download_file(src, local)
            except Exception as e:
                raise Failure("backend", f"get: {src}: {type(e).__name__}: {e}")
            if not local.exists():
                raise Failure("backend", f"get: {src}: no such file or directory in the sandbox")
            with tarfile.open(tar_path, "w") as t:
                t.add(local, arcname=base)
        return {}

    async def op_get(self, req: dict) -> dict:
        env = self.env(req["session"])
        src = req["src"].rstrip("/") or "/"
        if src.startswith(OWN_PREFIX):
            return await self.get_own(env, src, req["tar"])
        parent, base = os.path.split(src)
        inside = f"/tmp/.ahe-get-{uuid.uuid4().hex}.tar"
        q = shlex.quote
        # One exec: the tar comes back in the output (base64, after a marker line) when it is
        # small and the image has base64; else it is left for a download.
        r = await env.exec(
            f"test -e {q(src)} || test -L {q(src)} || {{ echo missing; exit 3; }}; "
            f"tar -C {q(parent or '/')} -cf {inside} {q(base)} || exit 4; "
            f"if [ $(wc -c < {inside}) -le {GET_INLINE_MAX} ] && "
            f"command -v base64 >/dev/null 2>&1; then "
            f"echo {TAR_MARK}; base64 {inside}; rm -f {inside}; fi",
            timeout_sec=600,
        )
        out = r.stdout or ""
        if r.return_code == 3 and "missing" in out:
            raise Failure("backend", f"get: {src}: no such file or directory in the sandbox")
        if r.return_code != 0:
            raise Failure("backend", f"get: {src}: tar failed: {out + (r.stderr or '')}")
        if TAR_MARK in out:
            encoded = out.split(TAR_MARK, 1)[1]
            try:
                data = base64.b64decode("".join(encoded.split()), validate=True)
            except ValueError as e:
                raise Failure("backend", f"get: {src}: the archive came back garbled: {e}")
            Path(req["tar"]).write_bytes(data)
            return {}
        try:
            await env.download_file(inside, req["tar"])
        except Exception as e:
            raise Failure("backend", f"get: {src}: {type(e).__name__}: {e}")
        finally:
            await env.exec(f"rm -f {inside}", timeout_sec=60)
        return {}

    async def stop(self, session: str, delete: bool) -> None:
        """Stops `session` once: a second stop (ahe's, or the shutdown's) waits for the first,
        and cancelling a caller never cancels the stop itself."""
        fut = self.stopping.get(session)
        if fut is None:
            env = self.envs.get(session)
            if env is None:
                return
            fut = asyncio.ensure_future(self._stop(session, env, delete))
            self.stopping[session] = fut
        await asyncio.shield(fut)

    async def _stop(self, session: str, env, delete: bool) -> None:
        start = self.starting.pop(session, None)
        if start is not None and not start.done():
            # Harbor does not end the compose commands of a start cancelled under it: what
            # they make would come up after the delete. The start finishes first.
            await settle(start, cancel=False, within=SETTLE_SEC)
        try:
            await env.stop(delete=delete)
        except Exception as e:
            raise Failure("backend", f"stop: {type(e).__name__}: {e}")
        finally:
            self.envs.pop(session, None)
            self.stopping.pop(session, None)
        # ahe's record of the live environment goes once it is deleted (also when ahe is gone).
        record = self.records.pop(session, None)
        if record and delete:
            with contextlib.suppress(OSError):
                os.unlink(record)

    async def op_delete(self, req: dict) -> dict:
        """Deletes an environment an earlier bridge started (same fields as start)."""
        env, _, _ = self.make(req)
        self.envs[req["session"]] = env
        if req.get("record"):
            self.records[req["session"]] = req["record"]
        await self.stop(req["session"], True)
        return {}

    async def op_stop(self, req: dict) -> dict:
        await self.stop(req["session"], bool(req.get("delete", True)))
        return {}

    async def handle(self, req: dict) -> None:
        t0 = time.monotonic()
        rid = req.get("id")
        op = req.get("op")
        fn = getattr(self, f"op_{op}", None)
        try:
            if fn is None:
                raise Failure("protocol", f"unknown op {op!r}")
            msg = {"id": rid, "ok": True, **(await fn(req))}
        except asyncio.CancelledError:
            msg = {"id": rid, "ok": False, "kind": "backend", "error": "cancelled", "cancelled": True}
        except Failure as e:
            msg = {"id": rid, "ok": False, "kind": e.kind, "error": str(e)}
        except KeyError as e:
            msg = {"id": rid, "ok": False, "kind": "protocol", "error": f"missing field {e}"}
        except Exception as e:
            traceback.print_exc()
            msg = {"id": rid, "ok": False, "kind": "backend", "error": f"{type(e).__name__}: {e}"}
        finally:
            self.tasks.pop(rid, None)
        if PROFILE:
            ms = 1000 * (time.monotonic() - t0)
            print(f"profile {op} {req.get('session', '-')} {ms:.0f}", file=sys.stderr)
        await self.answer(msg)

    async def shutdown(self) -> None:
        for t in list(self.tasks.values()):
            t.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await asyncio.gather(
            *(self.stop(s, True) for s in list(self.envs)), return_exceptions=True
        )

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=256 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        stop = asyncio.Event()
        # Ctrl-C is ahe's to handle (it ends its trials, then closes our input).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        read = asyncio.ensure_future(reader.readline())
        halt = asyncio.ensure_future(stop.wait())
        while True:
            done, _ = await asyncio.wait({read, halt}, return_when=asyncio.FIRST_COMPLETED)
            if halt in done:
                break
            line = read.result()
            if not line:
                break
            read = asyncio.ensure_future(reader.readline())
            try:
                req = json.loads(line)
            except json.JSONDecodeError as e:
                await self.answer({"id": None, "ok": False, "kind": "protocol", "error": str(e)})
                continue
            if req.get("op") == "cancel":
                t = self.tasks.get(req.get("target"))
                if t is not None:
                    t.cancel()
                continue
            self.tasks[req.get("id")] = asyncio.ensure_future(self.handle(req))
        read.cancel()
        halt.cancel()
        await self.shutdown()


def main() -> None:
    ask_daemon_os_once()
    thin_docker_start()
    asyncio.run(Bridge().serve())


if __name__ == "__main__":
    main()
