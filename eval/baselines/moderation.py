"""The OpenAI moderation endpoint as a baseline, through the openai SDK.

``client.moderations.create(model="omni-moderation-latest", input=text)``: ``flagged`` gives the label
(flagged -> unsafe), the score is the highest category score. What is sent: the user prompt (or text)
for a prompt; the response for a response or a prompt+response item (the endpoint has no notion of a
response "in the light of" its prompt); an image description is appended in brackets (images
themselves are not sent). ``base_url`` points the SDK at any compatible server.

The API key is read from the environment variable named by ``api_key_env`` when the first item runs;
it never enters the config, the transcript or the errors file: SDK errors are re-raised with the key
(and anything shaped like an ``sk-`` key) redacted. Retries with backoff on 429/5xx are the SDK's own
(``max_retries``). Like the guards, this protocol calls the endpoint itself (the chat backends speak
chat completions only): its turn has ``backend.kind = "openai-moderation"``, the input as the single
user message and the response JSON as the output.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Literal

from pydantic import Field

from agents.protocols.base import Context, Protocol, ProtocolConfig, ProtocolRun, register
from data.records import BackendRef, Message, Turn, Verdict

_KEY_LIKE = re.compile(r"sk-[A-Za-z0-9_\-*]{3,}")


def redact(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "[REDACTED]")
    return _KEY_LIKE.sub("[REDACTED]", text)


class ModerationConfig(ProtocolConfig):
    name: Literal["moderation"] = "moderation"
    model: str = "omni-moderation-latest"
    base_url: str | None = None  # None = api.openai.com
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the variable; the key itself never enters a config
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=6, ge=0)


def moderation_input(ctx: Context) -> str:
    c = ctx.content
    text = c.response if ctx.sample.subject != "prompt" else (c.prompt or c.text)
    if c.image_description:
        text = (text + "\n" if text else "") + f"[Image description: {c.image_description}]"
    return text


@register
class Moderation(Protocol):
    name = "moderation"
    version = "moderation-1"
    roles = ()
    Config = ModerationConfig

    def __init__(self, cfg: ModerationConfig):
        super().__init__(cfg)
        self._client = None
        self._key: str | None = None

    def client(self):
        if self._client is None:
            import openai

            cfg: ModerationConfig = self.cfg
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise RuntimeError(f"protocol.api_key_env: environment variable {cfg.api_key_env} is not set")
            self._key = key
            self._client = openai.OpenAI(api_key=key, base_url=cfg.base_url, timeout=cfg.timeout_s,
                                         max_retries=cfg.max_retries)
        return self._client

    def run(self, ctx: Context) -> ProtocolRun:
        return self.classify(ctx)
        yield []  # unreachable: makes run() a generator, which the runner finishes at its first step

    def classify(self, ctx: Context) -> Verdict:
        import openai

        cfg: ModerationConfig = self.cfg
        text = moderation_input(ctx)
        client = self.client()
        t0 = time.perf_counter()
        try:
            resp = client.moderations.create(model=cfg.model, input=text)
        except openai.OpenAIError as e:
            raise RuntimeError(redact(f"moderation request failed: {type(e).__name__}: {e}", self._key)) from None
        latency = time.perf_counter() - t0
        if not resp.results:
            raise RuntimeError("moderation response has no results")
        result = resp.results[0]
        scores = {k: float(v) for k, v in result.category_scores.model_dump(by_alias=True).items() if v is not None}
        flagged_cats = [k for k, v in result.categories.model_dump(by_alias=True).items() if v]
        top = max(scores, key=scores.get) if scores else None
        score = min(1.0, max(0.0, scores[top])) if top else None
        label = "unsafe" if result.flagged else "safe"
        output = redact(json.dumps(resp.model_dump(mode="json"), ensure_ascii=False), self._key)
        ctx.transcript.turns.append(Turn(
            step="moderate", role="moderation", backend=BackendRef(kind="openai-moderation", model=cfg.model),
            messages=[Message(role="user", content=text)], output=output, latency_s=round(latency, 6),
            parsed={"flagged": bool(result.flagged), "flagged_categories": flagged_cats, "max_category": top,
                    "score": score, "model": getattr(resp, "model", None)}))
        rationale = (f"flagged: {', '.join(flagged_cats) or 'no category listed'}" if result.flagged
                     else "not flagged") + (f"; highest category {top} = {score:.3f}" if top else "")
        return Verdict(label=label, score=score, rule="openai_moderation_flagged", rationale=rationale,
                       evidence=[f"{c}: {scores.get(c, float('nan')):.3f}" for c in flagged_cats])
