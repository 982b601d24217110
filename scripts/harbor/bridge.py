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
   "env": {...}, "build_timeout_sec": N|null, "trial_dir": DIR, "record": FILE|null}
                                                        {"workdir": "/app", "notes": [...]}
  {"op": "exec", "session": S, "command": "...", "cwd": DIR|null, "env": {...},
   "timeout_sec": N|null, "stdin_b64": B64|null}      {"exit_code": N|null, "output": "...",
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
carries its id. On end of input or SIGTERM the bridge stops (and deletes) every environment
it started, then exits; SIGINT is ignored (Ctrl-C is ahe's to handle).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
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
        self.envs[session] = env
        if req.get("record"):
            self.records[session] = req["record"]
        timeout = float(cfg.build_timeout_sec) + 300.0
        try:
            await asyncio.wait_for(env.start(force_build=False), timeout)
        except asyncio.TimeoutError:
            await self.stop(session, True)
            raise Failure("setup", f"harbor {name}: start did not finish within {timeout:.0f} s")
        except Exception as e:
            await self.stop(session, True)
            raise Failure("setup", f"harbor {name}: start failed: {type(e).__name__}: {e}")
        r = await env.exec("pwd", timeout_sec=60)
        workdir = (r.stdout or "").strip().splitlines()
        return {"workdir": workdir[-1] if workdir else "/", "notes": notes}

    async def op_exec(self, req: dict) -> dict:
        env = self.env(req["session"])
        marker = uuid.uuid4().hex
        command = req["command"]
        stdin = req.get("stdin_b64")
        staged = None
        if stdin is not None:
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
        run = env.exec(command, cwd=req.get("cwd"), env=exec_env)
        try:
            if timeout:
                r = await asyncio.wait_for(run, float(timeout))
            else:
                r = await run
        except asyncio.TimeoutError:
            await self.kill_marked(env, marker)
            return {"exit_code": None, "output": "", "timed_out": True}
        except asyncio.CancelledError:
            await self.kill_marked(env, marker)
            raise
        except Exception as e:
            raise Failure("backend", f"exec: {type(e).__name__}: {e}")
        finally:
            if staged:
                asyncio.ensure_future(env.exec(f"rm -f {staged}", timeout_sec=30))
        out = (r.stdout or "") + (r.stderr or "")
        return {"exit_code": r.return_code, "output": out, "timed_out": False}

    async def kill_marked(self, env, marker: str) -> None:
        try:
            await asyncio.shield(env.exec(KILL_MARKED.format(id=marker), timeout_sec=30))
        except Exception as e:
            print(f"bridge: killing exec {marker}: {e}", file=sys.stderr)

    async def op_put(self, req: dict) -> dict:
        env = self.env(req["session"])
        src, dest = Path(req["src"]), req["dest"]
        try:
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

    async def op_get(self, req: dict) -> dict:
        env = self.env(req["session"])
        src = req["src"].rstrip("/") or "/"
        parent, base = os.path.split(src)
        inside = f"/tmp/.ahe-get-{uuid.uuid4().hex}.tar"
        q = shlex.quote
        r = await env.exec(
            f"test -e {q(src)} || test -L {q(src)} || {{ echo missing; exit 3; }}; "
            f"tar -C {q(parent or '/')} -cf {inside} {q(base)}",
            timeout_sec=600,
        )
        if r.return_code == 3 and "missing" in (r.stdout or ""):
            raise Failure("backend", f"get: {src}: no such file or directory in the sandbox")
        if r.return_code != 0:
            raise Failure("backend", f"get: {src}: tar failed: {(r.stdout or '') + (r.stderr or '')}")
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
    asyncio.run(Bridge().serve())


if __name__ == "__main__":
    main()
