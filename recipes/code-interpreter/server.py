#!/usr/bin/env python3
# The code interpreter of the code-interpreter-v1 template: the HTTP protocol @e2b/code-interpreter
# speaks on port 49999 (POST /execute as newline-delimited JSON events, /contexts).
#
# Python runs in Jupyter kernels driven by jupyter_client (Debian's python3-jupyter-client and
# python3-ipykernel), with matplotlib figures described as charts (cube_charts.py). Debian has no
# Jupyter kernel for bash or JavaScript, so those run in long-lived processes of ours: bash itself,
# and Node (js_kernel.cjs) evaluating cells in one vm context.
#
# One kernel or process per context; executions in one context run one at a time, contexts run in
# parallel. Every event is written as soon as it comes, so output streams while the code runs.
import codecs
import json
import os
import queue
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client import KernelManager

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets ipykernel's debugger warning on every start
PORT = int(os.environ.get("CUBE_CODE_INTERPRETER_PORT", "49999"))
DEFAULT_CWD = os.environ.get("CUBE_CODE_INTERPRETER_CWD", "/home/user")
HERE = os.path.dirname(os.path.abspath(__file__))
# The languages offered, by the names the SDK may send, to the one each name means.
LANGUAGES = {"python": "python", "python3": "python", "bash": "bash", "sh": "bash", "javascript": "javascript", "js": "javascript"}
# After interrupting a bash or JavaScript cell (its client left), how long it has to stop before
# its process is killed (the context then starts afresh): a command may ignore SIGINT.
INTERRUPT_GRACE = 5.0
# What an envs name may be: a shell variable's name, so that bash can set it.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Jupyter mime types -> the result fields @e2b/code-interpreter reads (others go under their own name).
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "application/vnd.cube.chart+json": "chart",  # cube_charts.py's formatter
}
# Registers the chart formatter in a new kernel, leaving no names in the user's namespace.
CHARTS_SETUP = (
    "import sys as __cube_sys\n"
    f"__cube_sys.path.insert(0, {HERE!r})\n"
    "import cube_charts as __cube_charts\n"
    "__cube_sys.path.pop(0)\n"
    "__cube_charts.register(get_ipython())\n"
    "del __cube_sys, __cube_charts\n"
)


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


def no_kernel(language):
    # 404, not 400: @e2b/code-interpreter (JS) shows the body of a 404 (NotFoundError) but only the
    # status line of a 400, so the caller would not learn which languages there are.
    return NotFound(f"language '{language}' is not offered by this template: it offers {', '.join(sorted(LANGUAGES))}")


def result_event(data, is_main):
    event = {"type": "result", "is_main_result": is_main}
    for mime, value in data.items():
        event[MIME_FIELDS.get(mime, mime)] = value
    return event


class Context:
    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()

    def view(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class KernelContext(Context):
    """Python: an IPython kernel."""

    def __init__(self, language, cwd):
        super().__init__(language, cwd)
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self._connect()

    def _connect(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self._silent(CHARTS_SETUP)

    def restart(self):
        with self.lock:
            self.kc.stop_channels()
            self.km.restart_kernel(now=True)
            self._connect()

    def shutdown(self):
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)

    def _silent(self, code):
        """Runs code without output or history and waits for its reply."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        while True:
            reply = self.kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                return

    def execute(self, code, env_vars, emit, gone):
        """Runs code, calling emit(event) for each event; emit returning False, or gone() True, means the client left."""
        with self.lock:
            if env_vars:
                # Set for this execution only, then restored (what E2B's interpreter does).
                self._silent(
                    "import os as __cube_os\n"
                    f"__cube_env = {json.dumps(env_vars)}\n"
                    "__cube_saved = {k: __cube_os.environ.get(k) for k in __cube_env}\n"
                    "__cube_os.environ.update(__cube_env)\n"
                )
            try:
                self._run(code, emit, gone)
            finally:
                if env_vars:
                    self._silent(
                        "for __k, __v in __cube_saved.items():\n"
                        "    if __v is None: __cube_os.environ.pop(__k, None)\n"
                        "    else: __cube_os.environ[__k] = __v\n"
                        "del __cube_env, __cube_saved\n"
                    )

    def _run(self, code, emit, gone):
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        count = None
        listening = True
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                # A silent cell: the client's leaving (its timeoutMs) shows only on its connection.
                if listening and gone():
                    listening = False
                    self.km.interrupt_kernel()
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            event = None
            if kind == "stream":
                event = {"type": "stdout" if content["name"] == "stdout" else "stderr", "text": content["text"]}
            elif kind == "execute_result":
                event = result_event(content["data"], True)
            elif kind == "display_data":
                event = result_event(content["data"], False)
            elif kind == "error":
                event = {"type": "error", "name": content["ename"], "value": content["evalue"], "traceback": "\n".join(content["traceback"])}
            elif kind == "execute_input":
                count = content.get("execution_count")
            elif kind == "status" and content["execution_state"] == "idle":
                break
            if event is not None and listening and not emit(event):
                # The client went away (its timeout): stop the cell rather than let it run unseen.
                listening = False
                self.km.interrupt_kernel()
        if listening and count is not None:
            emit({"type": "number_of_executions", "execution_count": count})


class ProcessContext(Context):
    """A language run by a long-lived process of ours (bash, node) in its own process group: its
    stdout and stderr are streamed as they come, and for each cell it writes one line on a status
    pipe saying how the cell ended. A process that exits (`exit` in a cell) is started afresh for
    the next cell."""

    def __init__(self, language, cwd):
        super().__init__(language, cwd)
        self.count = 0
        self.proc = None
        self._start()

    def command(self, status_fd):
        raise NotImplementedError

    def cell(self, code, env_vars):
        """The bytes written to the process's stdin to run one cell."""
        raise NotImplementedError

    def outcome(self, line):
        """The events (results, an error) the cell's status line means."""
        raise NotImplementedError

    def _start(self):
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                self.command(write_fd),
                cwd=self.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,  # SIGINT to the group reaches the cell's commands too
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.status = os.fdopen(read_fd, "rb", buffering=0)

    def _stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr, self.status):
            f.close()

    def restart(self):
        with self.lock:
            self._stop()
            self.count = 0
            self._start()

    def shutdown(self):
        self._stop()

    def execute(self, code, env_vars, emit, gone):
        with self.lock:
            if self.proc.poll() is not None:
                self._stop()
                self._start()
            self.count += 1
            try:
                self.proc.stdin.write(self.cell(code, env_vars))
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass  # it died just now: the status pipe's end says so
            line, listening = self._pump(emit, gone)
            if not listening:
                return
            if line is None:
                code = self.proc.wait()
                emit({"type": "error", "name": "ExitError", "value": f"the {self.language} process exited with status {code}", "traceback": ""})
            else:
                for event in self.outcome(line):
                    emit(event)
            emit({"type": "number_of_executions", "execution_count": self.count})

    def _pump(self, emit, gone):
        """Streams output until the cell's status line (None when the process ended); returns it and whether the client still listens."""
        streams = {self.proc.stdout.fileno(): "stdout", self.proc.stderr.fileno(): "stderr"}
        decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in streams}
        status, listening, interrupted_at = b"", True, None

        def forward(fd, data):
            nonlocal listening
            text = decoders[fd].decode(data, final=not data)
            if text and listening and not emit({"type": streams[fd], "text": text}):
                listening = False

        while True:
            ready, _, _ = select.select([*streams, self.status], [], [], 0.5)
            for fd in ready:
                if fd is self.status:
                    data = os.read(self.status.fileno(), 4096)
                    if not data:
                        self._drain(streams, forward)
                        return None, listening
                    status += data
                    if status.endswith(b"\n"):
                        # Output written before the status line is in its pipe already: send it first.
                        self._drain(streams, forward)
                        return status.decode(), listening
                else:
                    forward(fd, os.read(fd, 65536))
            if listening and not ready and gone():
                listening = False
            if not listening and interrupted_at is None:
                # The client left (its timeoutMs): stop the cell rather than let it run unseen.
                interrupted_at = time.monotonic()
                self._signal(signal.SIGINT)
            elif interrupted_at is not None and time.monotonic() - interrupted_at > INTERRUPT_GRACE:
                self._signal(signal.SIGKILL)

    def _drain(self, streams, forward):
        while True:
            ready, _, _ = select.select(list(streams), [], [], 0)
            if not ready:
                return
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:  # the process is gone: nothing more will come
                    return
                forward(fd, data)

    def _signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


class BashContext(ProcessContext):
    """bash: one shell per context, each cell sourced in it so that variables, functions and the
    working directory carry over; the cell's exit status (its last command's) is its error when
    it is not 0."""

    def command(self, status_fd):
        self.status_fd = status_fd
        self.dir = tempfile.mkdtemp(prefix="cube-bash-")
        return ["bash", "--noprofile", "--norc"]

    def _start(self):
        super()._start()
        # SIGINT (the client left) ends the sourced cell, not the shell.
        self.proc.stdin.write(b"trap 'return 130 2>/dev/null' INT\n")
        self.proc.stdin.flush()

    def _stop(self):
        super()._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def cell(self, code, env_vars):
        path = os.path.join(self.dir, "cell")
        with open(path, "w") as f:
            f.write(code)
        names = " ".join(env_vars)
        # envs apply to this cell only: the shell's own values are saved, then put back.
        before = f"__cube_env=$(declare -p {names} 2>/dev/null); export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env_vars.items()) + "; " if env_vars else ""
        after = f"; unset {names}; eval \"$__cube_env\"; unset __cube_env" if env_vars else ""
        # The cell reads no input: the shell's stdin carries the next cells.
        return f"{before}source {shlex.quote(path)} </dev/null; __cube_rc=$?{after}; printf '%d\\n' \"$__cube_rc\" >&{self.status_fd}\n".encode()

    def outcome(self, line):
        code = int(line)
        if code == 0:
            return []
        return [{"type": "error", "name": "ExitError", "value": f"exit status {code}", "traceback": ""}]


class JavaScriptContext(ProcessContext):
    """JavaScript: Node evaluating cells in one vm context (js_kernel.cjs)."""

    def command(self, status_fd):
        return ["node", os.path.join(HERE, "js_kernel.cjs"), str(status_fd)]

    def cell(self, code, env_vars):
        return (json.dumps({"code": code, "env": env_vars}) + "\n").encode()

    def outcome(self, line):
        status = json.loads(line)
        if "error" in status:
            return [{"type": "error", **status["error"]}]
        if "result" in status:
            return [{"type": "result", "is_main_result": True, "text": status["result"]}]
        return []


CONTEXT_CLASSES = {"python": KernelContext, "bash": BashContext, "javascript": JavaScriptContext}


def offered(language):
    """The language a name means (python when none is given)."""
    language = (language or "python").lower()
    if language not in LANGUAGES:
        raise no_kernel(language)
    return language


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.default = {}

    def create(self, language, cwd):
        language = offered(language)
        cwd = cwd or DEFAULT_CWD
        if not os.path.isdir(cwd):
            raise BadRequest(f"cwd '{cwd}' is not a directory in the sandbox")
        ctx = CONTEXT_CLASSES[LANGUAGES[language]](language, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def default_for(self, language):
        language = offered(language)
        key = LANGUAGES[language]
        with self.lock:
            ctx = self.default.get(key)
        if ctx is None:
            ctx = self.create(language, DEFAULT_CWD)
            with self.lock:
                ctx = self.default.setdefault(key, ctx)
        return ctx

    def get(self, context_id):
        with self.lock:
            ctx = self.by_id.get(context_id)
        if ctx is None:
            raise NotFound(f"context '{context_id}' not found")
        return ctx

    def remove(self, context_id):
        with self.lock:
            ctx = self.by_id.pop(context_id, None)
            for key, d in list(self.default.items()):
                if d is ctx:
                    del self.default[key]
        if ctx is None:
            raise NotFound(f"context '{context_id}' not found")
        ctx.shutdown()

    def views(self):
        with self.lock:
            return [c.view() for c in self.by_id.values()]


CONTEXTS = Contexts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cube-code-interpreter"

    def log_message(self, fmt, *args):  # one line per request on stderr, as the sandbox's log
        sys.stderr.write("%s %s\n" % (self.command, fmt % args))

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length == 0:
            return {}
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as e:
            raise BadRequest(f"body is not JSON: {e}")
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        return body

    def _client_gone(self):
        """True when the client closed its connection (EOF on it; the request body was read whole)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _json(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self):
        parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
        return parts

    def _handle(self, fn):
        try:
            fn()
        except BadRequest as e:
            self._json(400, {"code": 400, "message": str(e)})
        except NotFound as e:
            self._json(404, {"code": 404, "message": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug or a dead kernel: answer, and say what it was
            sys.stderr.write(f"error: {type(e).__name__}: {e}\n")
            try:
                self._json(500, {"code": 500, "message": f"{type(e).__name__}: {e}"})
            except (BrokenPipeError, ConnectionResetError):
                pass

    def do_GET(self):
        def run():
            parts = self._route()
            if parts == ["health"]:
                self._json(200, {"status": "ok"})
            elif parts == ["contexts"]:
                self._json(200, CONTEXTS.views())
            else:
                raise NotFound(f"no route GET {self.path}")

        self._handle(run)

    def do_DELETE(self):
        def run():
            parts = self._route()
            if len(parts) == 2 and parts[0] == "contexts":
                CONTEXTS.remove(parts[1])
                self._json(200, {})
            else:
                raise NotFound(f"no route DELETE {self.path}")

        self._handle(run)

    def do_POST(self):
        def run():
            parts = self._route()
            body = self._body()
            if parts == ["execute"]:
                self._execute(body)
            elif parts == ["contexts"]:
                self._json(200, CONTEXTS.create(body.get("language"), body.get("cwd")).view())
            elif len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                CONTEXTS.get(parts[1]).restart()
                self._json(200, {})
            else:
                raise NotFound(f"no route POST {self.path}")

        self._handle(run)

    def _execute(self, body):
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest("'code' must be a string")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()):
            raise BadRequest("'env_vars' must map names to strings")
        bad = [k for k in env_vars if not ENV_NAME.match(k)]
        if bad:
            raise BadRequest(f"'env_vars' names must be letters, digits and _ (not starting with a digit): {', '.join(bad)}")
        if body.get("context_id"):
            ctx = CONTEXTS.get(body["context_id"])
        else:
            ctx = CONTEXTS.default_for(body.get("language"))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(event):
            line = (json.dumps(event) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                return True
            except (BrokenPipeError, ConnectionResetError):
                return False

        ctx.execute(code, env_vars, emit, self._client_gone)
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main():
    # The default Python context is started before the port opens, so the template's ready check
    # (the port answering) means the first runCode does not wait for a kernel.
    CONTEXTS.default_for("python")
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    sys.stderr.write(f"code interpreter listening on :{PORT}\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
