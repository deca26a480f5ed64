"""A scripted OpenAI-compatible chat server on 127.0.0.1 for the LLM tests (never the network).

Each request takes the next script item: a string is the answer; {"status": 429} (or any status)
is an error; {"delay": seconds, "content": text} answers late. When the script runs out it answers 500.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeLLMServer:
    def __init__(self, script: list | None = None) -> None:
        self.script = list(script or [])
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    item = server.script.pop(0) if server.script else {"status": 500}
                if isinstance(item, str):
                    item = {"content": item}
                time.sleep(item.get("delay", 0))
                if "status" in item:
                    self._send(item["status"], {"error": {"message": f"scripted {item['status']}",
                                                          "type": "scripted", "code": item["status"]}})
                    return
                prompt = " ".join(m.get("content", "") for m in body.get("messages", []))
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": item["content"]}}],
                    "usage": {"prompt_tokens": max(1, len(prompt) // 4),
                              "completion_tokens": max(1, len(item["content"]) // 4),
                              "total_tokens": max(1, len(prompt) // 4) + max(1, len(item["content"]) // 4)},
                })

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
