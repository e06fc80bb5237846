"""A real HTTP server speaking the OpenAI chat-completions API, for tests only (127.0.0.1, a free port).

It counts hits, records request bodies and Authorization headers, measures how many requests are in
flight at once, and can be scripted to fail: ``failures={"FLAKY": [429, 500]}`` answers the first two
requests whose messages contain "FLAKY" with those statuses, then 200.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Body = dict[str, Any]


def message_text(body: Body) -> str:
    parts = []
    for m in body.get("messages", []):
        c = m.get("content")
        parts.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict)))
    return "\n".join(parts)


def echo_reply(body: Body) -> str:
    return "echo: " + message_text(body)[-40:]


def aetheria_reply(body: Body) -> str:
    """Role-appropriate JSON for the Aetheria protocol, chosen by the system prompt."""
    system = body["messages"][0]["content"]
    if system.startswith("You are the Strict"):
        return json.dumps({"argument": "Worst case: the request could enable harm.", "risk_score": 0.7})
    if system.startswith("You are the Loose"):
        return json.dumps({"argument": "A benign reading is plausible.", "risk_score": 0.3})
    if system.startswith("You are the Arbiter"):
        return json.dumps({"benign_context_verified": False, "concrete_violation": True, "final_score": 0.8,
                           "evidence": ["could enable harm"], "rationale": "Rule 2 applies."})
    return "Summary: a request under review. No precedents are available."


class FakeOpenAIServer:
    def __init__(self, reply: Callable[[Body], str] = echo_reply, *, failures: dict[str, list[int]] | None = None,
                 delay_s: float = 0.0, echo_auth_on: str | None = None):
        self.reply, self.delay_s, self.echo_auth_on = reply, delay_s, echo_auth_on
        self.failures = {k: list(v) for k, v in (failures or {}).items()}
        self.lock = threading.Lock()
        self.hits = 0
        self.hits_by_marker: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[Body] = []
        self.auth_headers: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def _status_for(self, text: str) -> int:
        for marker, statuses in self.failures.items():
            if marker in text:
                self.hits_by_marker[marker] = self.hits_by_marker.get(marker, 0) + 1
                return statuses.pop(0) if statuses else 200
        return 200

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, obj: Body) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                text = message_text(body)
                auth = self.headers.get("Authorization", "")
                with server.lock:
                    server.hits += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.bodies.append(body)
                    server.auth_headers.append(auth)
                    status = server._status_for(text)
                try:
                    time.sleep(server.delay_s)
                    if server.echo_auth_on and server.echo_auth_on in text:
                        self._send(400, {"error": {"message": f"rejected credentials {auth}", "type": "invalid"}})
                    elif status != 200:
                        self._send(status, {"error": {"message": f"scripted status {status}", "type": "scripted"}})
                    else:
                        content = server.reply(body)
                        self._send(200, {
                            "id": f"chatcmpl-{server.hits}", "object": "chat.completion", "created": int(time.time()),
                            "model": body.get("model", "fake"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(content.split()),
                                      "total_tokens": len(text.split()) + len(content.split())},
                        })
                finally:
                    with server.lock:
                        server.in_flight -= 1

        return Handler
