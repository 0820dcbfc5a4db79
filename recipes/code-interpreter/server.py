#!/usr/bin/env python3
# The code interpreter of the code-interpreter-v1 template: the HTTP protocol @e2b/code-interpreter
# speaks on port 49999 (POST /execute as newline-delimited JSON events, /contexts), over Jupyter
# kernels driven by jupyter_client (Debian's python3-jupyter-client and python3-ipykernel).
#
# One kernel per context; executions in one context run one at a time (a kernel runs one cell at a
# time anyway), contexts run in parallel. Every event is written as soon as the kernel publishes it,
# so output streams while the code runs.
import json
import os
import queue
import select
import socket
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client import KernelManager

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets ipykernel's debugger warning on every start
PORT = int(os.environ.get("CUBE_CODE_INTERPRETER_PORT", "49999"))
DEFAULT_CWD = os.environ.get("CUBE_CODE_INTERPRETER_CWD", "/home/user")
# Languages this template has a kernel for, by the names the SDK sends.
KERNELS = {"python": "python3", "python3": "python3"}
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
}


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


def no_kernel(language):
    # 404, not 400: @e2b/code-interpreter (JS) shows the body of a 404 (NotFoundError) but only the
    # status line of a 400, so the caller would not learn which languages there are.
    return NotFound(f"language '{language}' is not offered by this template: it has a kernel for {', '.join(sorted(set(KERNELS)))} only")


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
        self.km = KernelManager(kernel_name=KERNELS[language])
        self.km.start_kernel(cwd=cwd)
        self._connect()

    def _connect(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def view(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

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


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.default = {}

    def create(self, language, cwd):
        language = (language or "python").lower()
        if language not in KERNELS:
            raise no_kernel(language)
        cwd = cwd or DEFAULT_CWD
        if not os.path.isdir(cwd):
            raise BadRequest(f"cwd '{cwd}' is not a directory in the sandbox")
        ctx = Context(language, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def default_for(self, language):
        language = (language or "python").lower()
        if language not in KERNELS:
            raise no_kernel(language)
        key = KERNELS[language]
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
