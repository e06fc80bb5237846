"""OpenAI moderation baseline against a local fake server (127.0.0.1, POST /v1/moderations):
label and score mapping, what is sent, and the API key never reaching transcripts or the errors file."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.pipeline import build_runner
from agents.runner import errors_path
from data.config import GenerateConfig
from data.jsonl import read_records
from data.records import Sample

KEY = "sk-test-SECRET-0123456789abcdef"
CATEGORIES = ["harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
              "self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence",
              "violence/graphic"]


def moderation_body(text: str, model: str) -> dict:
    scores = {c: 0.01 for c in CATEGORIES}
    if "BAD" in text:
        scores.update({"violence": 0.93, "illicit/violent": 0.61})
    flags = {c: s > 0.5 for c, s in scores.items()}
    return {"id": "modr-test", "model": model,
            "results": [{"flagged": any(flags.values()), "categories": flags, "category_scores": scores,
                         "category_applied_input_types": {c: ["text"] for c in CATEGORIES}}]}


class FakeModerationServer:
    def __init__(self):
        self.bodies: list[dict] = []
        self.auth: list[str] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.auth.append(self.headers.get("Authorization", ""))
                outer.paths.append(self.path)
                if self.path != "/v1/moderations":
                    status, payload = 404, {"error": {"message": "not found"}}
                elif "REJECT" in body["input"]:  # what api.openai.com does: echo a masked key in the message
                    key = self.headers.get("Authorization", "")[7:]
                    status, payload = 401, {"error": {"message": f"Incorrect API key provided: {key}.",
                                                      "type": "invalid_request_error", "code": "invalid_api_key"}}
                else:
                    status, payload = 200, moderation_body(body["input"], body["model"])
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeModerationServer()
    yield s
    s.close()


def run(tmp_path, server, samples, monkeypatch, env="TRIBUNAL_TEST_MODERATION_KEY"):
    monkeypatch.setenv("TRIBUNAL_TEST_MODERATION_KEY", KEY)
    cfg = GenerateConfig(protocol={"name": "moderation", "base_url": server.base_url, "api_key_env": env,
                                   "max_retries": 0, "timeout_s": 10}, backends={}, progress=False)
    runner = build_runner(cfg, output=str(tmp_path / "mod.jsonl"))
    stats = runner.run(samples)
    out = tmp_path / "mod.jsonl"
    return stats, ({t.sample.id: t for t in read_records(out)} if out.exists() else {})


SAMPLES = [Sample(id="ok", text="What time is it in Lima?", label="safe"),
           Sample(id="bad", text="BAD: plan to hurt someone", label="unsafe"),
           Sample(id="resp", prompt="BAD request", response="I won't help with that.", label="safe"),
           Sample(id="img", text="what is this?", image_description="BAD picture", label="unsafe")]


def test_flagged_is_unsafe_and_score_is_the_top_category(tmp_path, server, monkeypatch):
    stats, out = run(tmp_path, server, SAMPLES, monkeypatch)
    assert stats.done == 4 and stats.failed == 0
    assert server.paths == ["/v1/moderations"] * 4 and set(server.auth) == {f"Bearer {KEY}"}
    assert {b["model"] for b in server.bodies} == {"omni-moderation-latest"}
    bad = out["bad"]
    assert (bad.verdict.label, bad.verdict.score) == ("unsafe", 0.93)
    assert bad.verdict.evidence == ["illicit/violent: 0.610", "violence: 0.930"]
    (turn,) = bad.turns
    assert turn.backend.kind == "openai-moderation" and turn.messages[0].content == SAMPLES[1].text
    assert turn.parsed["max_category"] == "violence" and json.loads(turn.output)["id"] == "modr-test"
    assert (out["ok"].verdict.label, out["ok"].verdict.score) == ("safe", 0.01)
    # a prompt+response item is judged on its response; an image description is appended
    assert out["resp"].verdict.label == "safe" and out["resp"].turns[0].messages[0].content == "I won't help with that."
    assert out["img"].turns[0].messages[0].content == "what is this?\n[Image description: BAD picture]"
    assert out["img"].verdict.label == "unsafe"


def test_the_key_never_reaches_transcripts_or_errors(tmp_path, server, monkeypatch):
    samples = SAMPLES[:2] + [Sample(id="rej", text="REJECT this one", label="safe")]
    stats, _ = run(tmp_path, server, samples, monkeypatch)
    assert stats.done == 2 and stats.failed == 1
    errors = errors_path(tmp_path / "mod.jsonl").read_text()
    assert "moderation request failed: AuthenticationError" in errors and "[REDACTED]" in errors
    for path in (tmp_path / "mod.jsonl", errors_path(tmp_path / "mod.jsonl")):
        text = path.read_text()
        assert KEY not in text and "SECRET" not in text and "sk-test" not in text


def test_missing_key_fails_each_item_with_a_clear_error(tmp_path, server, monkeypatch):
    monkeypatch.delenv("TRIBUNAL_TEST_NO_SUCH_KEY", raising=False)
    stats, _ = run(tmp_path, server, SAMPLES[:1], monkeypatch, env="TRIBUNAL_TEST_NO_SUCH_KEY")
    assert stats.failed == 1 and server.bodies == []
    assert "environment variable TRIBUNAL_TEST_NO_SUCH_KEY is not set" in errors_path(tmp_path / "mod.jsonl").read_text()
