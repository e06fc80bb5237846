"""The openai backend against a real local HTTP server speaking the chat-completions API."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agents.backends.base import BackendError, ChatRequest
from agents.backends.openai_backend import OpenAIBackend
from agents.pipeline import build_runner
from data.config import DatasetConfig, GenerateConfig, OpenAIBackendConfig, load_config
from data.jsonl import read_records
from data.records import Message
from data.sources import load_samples
from tests.fake_openai_server import FakeOpenAIServer, aetheria_reply

SECRET = "sk-test-SECRET-123"
KEY_ENV = "TRIBUNAL_TEST_OPENAI_KEY"


def req(text: str, cid: str = "t|step|role|0|0", **kw) -> ChatRequest:
    return ChatRequest(custom_id=cid, role="strict",
                       messages=[Message(role="system", content="sys"), Message(role="user", content=text)], **kw)


def backend_cfg(server: FakeOpenAIServer, cache_dir: Path | None = None, **kw) -> OpenAIBackendConfig:
    base = {"model": "fake-model", "base_url": server.base_url, "api_key_env": KEY_ENV, "max_retries": 3,
            "backoff_initial_s": 0.0, "backoff_max_s": 0.0, "timeout_s": 10,
            "cache_dir": str(cache_dir) if cache_dir else None}
    return OpenAIBackendConfig(**{**base, **kw})


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def test_retries_on_429_and_500_then_succeeds(key):
    with FakeOpenAIServer(failures={"FLAKY": [429, 500]}) as server:
        be = OpenAIBackend(backend_cfg(server))
        (c,) = be.generate([req("FLAKY question")])
        be.close()
    assert c.error is None and c.text.startswith("echo:")
    assert server.hits_by_marker["FLAKY"] == 3
    assert c.prompt_tokens == 3 and c.completion_tokens == len(c.text.split())
    assert c.latency_s > 0 and not c.cached


def test_gives_up_after_max_retries_with_error_completion(key):
    with FakeOpenAIServer(failures={"DOWN": [503] * 10}) as server:
        be = OpenAIBackend(backend_cfg(server, max_retries=2))
        out = be.generate([req("DOWN now", cid="a"), req("fine", cid="b")])
        be.close()
    assert server.hits_by_marker["DOWN"] == 3  # 1 try + 2 retries
    assert out[0].error.startswith("InternalServerError:") and "503" in out[0].error
    assert out[1].error is None and out[1].text


def test_non_retryable_400_fails_at_once(key):
    with FakeOpenAIServer(failures={"BAD": [400, 400, 400]}) as server:
        be = OpenAIBackend(backend_cfg(server))
        (c,) = be.generate([req("BAD request")])
        be.close()
    assert server.hits_by_marker["BAD"] == 1
    assert c.error.startswith("BadRequestError:") and c.text == ""


def test_cache_hit_makes_no_call_and_errors_are_not_cached(key, tmp_path):
    with FakeOpenAIServer(failures={"BAD": [400, 400]}) as server:
        be = OpenAIBackend(backend_cfg(server, tmp_path / "cache"))
        first = be.generate([req("hello there"), req("BAD one", cid="x")])
        hits = server.hits
        second = be.generate([req("hello there"), req("BAD one", cid="x")])
        be.close()
        be2 = OpenAIBackend(backend_cfg(server, tmp_path / "cache"))  # a new process reads the same cache
        (third,) = be2.generate([req("hello there")])
        be2.close()
    assert not first[0].cached and second[0].cached and third.cached
    assert second[0].text == first[0].text == third.text and second[0].latency_s == 0.0
    assert (second[0].prompt_tokens, second[0].completion_tokens) == (first[0].prompt_tokens, first[0].completion_tokens)
    assert server.hits == hits + 1  # only the failed request went out again
    assert second[1].error and not second[1].cached
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1
    assert set(json.loads(files[0].read_text())) == {"text", "prompt_tokens", "completion_tokens"}
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_cache_key_depends_on_base_url_and_body(key, tmp_path):
    with FakeOpenAIServer() as server:
        be = OpenAIBackend(backend_cfg(server, tmp_path))
        body = {"model": "m", "messages": []}
        k1 = be.cache_key(body)
        be.close()
    other = OpenAIBackend(OpenAIBackendConfig(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV))
    assert other.cache_key(body) != k1 and be.cache_key({**body, "max_tokens": 5}) != k1
    other.close()


def test_concurrency_is_bounded_and_order_kept(key):
    with FakeOpenAIServer(delay_s=0.05) as server:
        be = OpenAIBackend(backend_cfg(server, concurrency=3))
        out = be.generate([req(f"item-{i}", cid=str(i)) for i in range(12)])
        be.close()
    assert server.hits == 12
    assert 2 <= server.max_in_flight <= 3
    assert [c.text for c in out] == [f"echo: sys\nitem-{i}" for i in range(12)]


def test_request_body_images_json_mode_temperature_extra_body(key, tmp_path):
    img = tmp_path / "pic.png"
    img.write_bytes(b"\x89PNG fake bytes")
    msgs = [Message(role="system", content="sys"),
            Message(role="user", content="Describe", images=[str(img), "https://example.org/a.jpg"])]
    with FakeOpenAIServer() as server:
        be = OpenAIBackend(backend_cfg(server, temperature=0.3, extra_body={"top_k": 5}))
        out = be.generate([ChatRequest(custom_id="i", role="preprocessor", messages=msgs, json_mode=True),
                           req("plain", cid="p", temperature=0.9),
                           ChatRequest(custom_id="m", role="preprocessor",
                                       messages=[Message(role="user", content="x", images=[str(tmp_path / "no.png")])])])
        be.close()
    assert out[0].error is None and out[1].error is None
    assert out[2].error.startswith("FileNotFoundError:") and server.hits == 2
    img_body = next(b for b in server.bodies if isinstance(b["messages"][-1]["content"], list))
    parts = img_body["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "Describe"}
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert parts[2]["image_url"]["url"] == "https://example.org/a.jpg"
    assert img_body["response_format"] == {"type": "json_object"} and img_body["temperature"] == 0.3
    assert img_body["top_k"] == 5 and "images" not in img_body["messages"][0]
    plain = next(b for b in server.bodies if b is not img_body)
    assert plain["temperature"] == 0.9 and "response_format" not in plain


def test_api_key_from_named_env_var(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(BackendError, match=KEY_ENV):
        OpenAIBackend(OpenAIBackendConfig(model="m", api_key_env=KEY_ENV))
    with FakeOpenAIServer() as server:  # a local server that needs no key gets a dummy one
        be = OpenAIBackend(backend_cfg(server))
        (c,) = be.generate([req("hi")])
        be.close()
        monkeypatch.setenv(KEY_ENV, SECRET)
        be = OpenAIBackend(backend_cfg(server))
        be.generate([req("hi again")])
        be.close()
    assert c.error is None
    assert server.auth_headers == ["Bearer EMPTY", f"Bearer {SECRET}"]


def test_secret_never_leaks_through_a_full_aetheria_run(key, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    out_dir = tmp_path / "run"
    samples, _ = load_samples(DatasetConfig(limit=4))
    echo_id = samples[0].id
    with FakeOpenAIServer(aetheria_reply, failures={samples[1].text[:30]: [429]},
                          echo_auth_on=samples[0].text[:30]) as server:
        cfg = GenerateConfig(output=str(out_dir / "transcripts.jsonl"), protocol={"name": "aetheria", "rounds": 2},
                             backends={"default": backend_cfg(server, out_dir / "cache")}, progress=False)
        runner = build_runner(cfg)
        stats = runner.run(samples)
        for be in runner.backends.values():
            be.close()
    assert (stats.done, stats.failed) == (3, 1)  # sample 0: the server echoes the key in a 400 error
    assert all(a == f"Bearer {SECRET}" for a in server.auth_headers)
    trs = read_records(out_dir / "transcripts.jsonl")
    assert {t.verdict.rule for t in trs} == {"rule2_risk_confirmation"}
    assert all(len(t.turns) == 6 and t.turns[0].backend.kind == "openai" for t in trs)
    errors = (out_dir / "transcripts.errors.jsonl").read_text()
    assert echo_id in errors and "rejected credentials" in errors and "***" in errors
    files = [p for p in out_dir.rglob("*") if p.is_file()]
    assert len(files) == 2 + 3 * 6  # transcripts, errors and one cache entry per call
    for p in files:
        assert SECRET not in p.read_text(encoding="utf-8", errors="replace"), p
    assert "rejected credentials" in caplog.text and "attempt 1 failed" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize("name", ["teacher_openai", "teacher_local_server"])
def test_teacher_configs_load_and_build(name, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("TRIBUNAL_LOCAL_KEY", raising=False)
    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.yaml"
    cfg = load_config(path, GenerateConfig)
    runner = build_runner(cfg, path=str(path))
    try:
        assert all(isinstance(b, OpenAIBackend) for b in runner.backends.values())
        if name == "teacher_openai":
            assert runner.backends[cfg.roles["arbiter"]].cfg.model == "gpt-4o"
            assert runner.backends[cfg.roles["strict"]].cfg.model == "gpt-4o-mini"
            assert cfg.pricing["gpt-4o"].completion_per_1m == 10.0
        else:
            assert runner.backends["default"].base_url.startswith("http://127.0.0.1:8000/v1")
    finally:
        for be in runner.backends.values():
            be.close()
