"""Any OpenAI-compatible chat endpoint (OpenAI, Azure, vLLM, llama.cpp, Ollama servers).

A batch of requests runs concurrently on a private asyncio loop with ``AsyncOpenAI``, at most
``concurrency`` in flight. Failures on 408/429/5xx, timeouts and connection errors are retried with
exponential backoff and jitter (tenacity; the SDK's own retries are off); other errors fail at once. A call
that still fails comes back as ``Completion(error=...)``: one bad request never stops a batch. Successful
replies are cached on disk by a hash of the base URL and the exact request body.

The API key is read from the environment variable *named* by ``api_key_env`` and is kept out of every
error, log line and cache file.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from agents.backends.base import BackendError, ChatRequest, Completion, request_hash
from agents.backends.openai_body import chat_body
from agents.backends.response_cache import CachedReply, ResponseCache
from data.config import OpenAIBackendConfig
from data.records import BackendRef

log = logging.getLogger(__name__)

NO_KEY = "EMPTY"  # what local servers that need no key are sent


def is_retryable(e: BaseException) -> bool:
    """Timeouts and connection errors, 408, 429 and 5xx; every other 4xx is the request's own fault."""
    if isinstance(e, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(e, openai.APIStatusError):
        return e.status_code in (408, 429) or e.status_code >= 500
    return False


def resolve_api_key(cfg: OpenAIBackendConfig) -> str:
    key = os.environ.get(cfg.api_key_env)
    if key:
        return key
    if cfg.base_url:
        return NO_KEY
    raise BackendError(f"environment variable {cfg.api_key_env} is not set (backend api_key_env: "
                       f"{cfg.api_key_env}); export the API key there, or set base_url for a server that needs none")


class OpenAIBackend:
    price_factor = 1.0

    def __init__(self, cfg: OpenAIBackendConfig):
        self.cfg = cfg
        self.ref = BackendRef(kind="openai", model=cfg.model)
        self._key = resolve_api_key(cfg)
        self.cache = ResponseCache(cfg.cache_dir) if cfg.cache_dir else None
        self._loop = asyncio.new_event_loop()
        self._client = openai.AsyncOpenAI(api_key=self._key, base_url=cfg.base_url, timeout=cfg.timeout_s,
                                          max_retries=0)
        self.base_url = str(self._client.base_url)

    # ------------------------------------------------------------------ helpers
    def _describe(self, e: BaseException) -> str:
        """``Type: message`` with the key blanked out (servers sometimes echo what they were sent)."""
        text = f"{type(e).__name__}: {e}"
        return text.replace(self._key, "***") if self._key != NO_KEY else text

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.info("%s: attempt %d failed (%s); retrying in %.2fs", self.cfg.model, state.attempt_number,
                 self._describe(exc) if exc else "?", state.upcoming_sleep)

    def cache_key(self, body: dict[str, Any]) -> str:
        return request_hash({"base_url": self.base_url, "body": body, "extra_body": self.cfg.extra_body})

    # ------------------------------------------------------------------ calls
    async def _create(self, body: dict[str, Any], sem: asyncio.Semaphore):
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.cfg.max_retries + 1),
            wait=wait_exponential_jitter(multiplier=self.cfg.backoff_initial_s, max=self.cfg.backoff_max_s,
                                         jitter=self.cfg.backoff_initial_s),
            retry=retry_if_exception(is_retryable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                async with sem:  # the slot is held per attempt, not during backoff
                    return await self._client.chat.completions.create(**body, extra_body=self.cfg.extra_body or None)

    async def _one(self, req: ChatRequest, sem: asyncio.Semaphore) -> Completion:
        try:
            body = chat_body(req, self.cfg.model, temperature=self.cfg.temperature, json_mode=self.cfg.json_mode)
        except OSError as e:  # a missing local image
            return Completion(error=self._describe(e))
        key = self.cache_key(body)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return Completion(text=hit.text, prompt_tokens=hit.prompt_tokens, completion_tokens=hit.completion_tokens,
                              latency_s=0.0, cached=True)
        t0 = time.perf_counter()
        try:
            resp = await self._create(body, sem)
            if not resp.choices:
                raise BackendError("the server returned no choices")
        except Exception as e:  # noqa: BLE001 - a per-request failure is returned, never raised
            msg = self._describe(e)
            log.warning("%s: request %s failed: %s", self.cfg.model, req.custom_id, msg)
            return Completion(error=msg, latency_s=time.perf_counter() - t0)
        latency = time.perf_counter() - t0
        choice = resp.choices[0]
        reply = CachedReply(text=choice.message.content or "",
                            prompt_tokens=resp.usage.prompt_tokens if resp.usage else 0,
                            completion_tokens=resp.usage.completion_tokens if resp.usage else 0)
        if self.cache is not None:
            try:
                self.cache.put(key, reply)
            except OSError as e:  # a full or read-only disk costs the cache entry, not the reply
                log.warning("response cache: cannot write %s (%s)", self.cache.path(key), e)
        return Completion(text=reply.text, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                          latency_s=latency, extra={"finish_reason": choice.finish_reason})

    async def _batch(self, requests: list[ChatRequest]) -> list[Completion]:
        sem = asyncio.Semaphore(self.cfg.concurrency)
        return list(await asyncio.gather(*(self._one(r, sem) for r in requests)))

    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        """Completions in request order. Not callable from inside a running event loop."""
        if not requests:
            return []
        if self._loop.is_closed():
            raise BackendError("generate() after close()")
        return self._loop.run_until_complete(self._batch(requests))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._client.close())
            self._loop.close()
