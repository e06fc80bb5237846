"""OpenAI Batch API backend: a run advances one protocol step per export/import cycle.

A cycle is one ordinary run (``tribunal generate``) with this backend. Every sample replays its protocol
from the replies stored in ``batch_dir`` (see ``agents/protocols/base.py``); its first call without a
reply comes back ``pending`` and is remembered. At the end of the run the runner calls ``end_cycle``,
which writes the remembered calls as a Batch API input file ``batch_dir/input-NNN.jsonl``. Submit it
(``agents.backends.batch_submit``), put the output file in ``batch_dir`` as ``output-NNN.jsonl`` (or keep
the API's ``*_output.jsonl`` name) and run the same command again.

Replies are read from every ``output-*.jsonl`` and ``*_output.jsonl`` in ``batch_dir`` in name order; a
custom_id answered twice keeps its first answer. A failed request (non-200 status or an ``error``) is
listed in ``batch_dir/failed.jsonl`` and is pending again, so it is re-exported; after
``MAX_FAILED_ATTEMPTS`` failures it comes back as ``Completion(error=...)``.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from agents.backends.atomic import write_atomic
from agents.backends.base import ChatRequest, Completion
from agents.backends.batch_output import BatchResult, read_output_file
from agents.backends.openai_body import chat_body
from data.config import BatchBackendConfig
from data.records import BackendRef

log = logging.getLogger(__name__)

MAX_FAILED_ATTEMPTS = 3
OUTPUT_GLOBS = ("output-*.jsonl", "*_output.jsonl")
FAILED_FILE = "failed.jsonl"
_INPUT_RE = re.compile(r"^input-(\d+)\.jsonl$")


class BatchBackend:
    def __init__(self, cfg: BatchBackendConfig):
        self.cfg = cfg
        self.ref = BackendRef(kind="batch", model=cfg.model)
        self.price_factor = cfg.price_factor
        self.dir = Path(cfg.batch_dir)
        self.answers: dict[str, BatchResult] = {}  # custom_id -> first successful reply
        self.failures: dict[str, list[BatchResult]] = {}  # custom_id -> failed attempts, in file order
        self._read: set[str] = set()  # output files already imported
        self._pending: dict[str, dict[str, Any]] = {}  # custom_id -> request body, to export
        self.import_outputs()

    # ------------------------------------------------------------------ import
    def output_files(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        files = {p for pattern in OUTPUT_GLOBS for p in self.dir.glob(pattern) if p.is_file()}
        return sorted(files, key=lambda p: p.name)

    def import_outputs(self) -> int:
        """Read output files not read yet; returns how many. Raises RecordError (file:line: field) on a bad line."""
        new = [p for p in self.output_files() if p.name not in self._read]
        for path in new:
            results = read_output_file(path)  # the whole file validates before any of it is used
            for r in results:
                self._merge(r)
            self._read.add(path.name)
        if new and self.failures:
            self._write_failed()
        return len(new)

    def _merge(self, r: BatchResult) -> None:
        first = self.answers.get(r.custom_id)
        if r.error is not None:
            if first is None:
                self.failures.setdefault(r.custom_id, []).append(r)
            return
        if first is None:
            self.answers[r.custom_id] = r
        elif first.text != r.text:
            log.warning("batch: %s answered again at %s; keeping the first answer (%s)", r.custom_id, r.where,
                        first.where)

    def _write_failed(self) -> None:
        lines = []
        for cid, fails in sorted(self.failures.items()):
            status = ("resolved" if cid in self.answers else
                      "given_up" if len(fails) >= MAX_FAILED_ATTEMPTS else "retrying")
            lines.append(json.dumps({"custom_id": cid, "error": fails[-1].error, "attempts": len(fails),
                                     "status": status, "where": [f.where for f in fails]}, ensure_ascii=False))
        write_atomic(self.dir / FAILED_FILE, "".join(line + "\n" for line in lines))

    # ------------------------------------------------------------------ the backend
    def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        self.import_outputs()
        out = []
        for req in requests:
            cid = req.custom_id
            if (ans := self.answers.get(cid)) is not None:
                out.append(Completion(text=ans.text, prompt_tokens=ans.prompt_tokens,
                                      completion_tokens=ans.completion_tokens, extra={"batch_source": ans.where}))
                continue
            fails = self.failures.get(cid, [])
            if len(fails) >= MAX_FAILED_ATTEMPTS:
                out.append(Completion(error=f"batch request failed {len(fails)} times; last: {fails[-1].error}"))
                continue
            try:
                body = chat_body(req, self.cfg.model, temperature=self.cfg.temperature, json_mode=self.cfg.json_mode)
            except OSError as e:  # a missing local image cannot be exported
                out.append(Completion(error=f"{type(e).__name__}: {e}"))
                continue
            self._pending[cid] = body
            out.append(Completion(pending=True))
        return out

    def next_input_path(self) -> Path:
        nums = [int(m.group(1)) for p in self.dir.glob("input-*.jsonl") if (m := _INPUT_RE.match(p.name))]
        return self.dir / f"input-{max(nums, default=0) + 1:03d}.jsonl"

    def end_cycle(self) -> Path | None:
        """Write the pending requests as a Batch API input file; None when nothing is pending."""
        if not self._pending:
            return None
        lines = [json.dumps({"custom_id": cid, "method": "POST", "url": self.cfg.endpoint, "body": body},
                            ensure_ascii=False) for cid, body in self._pending.items()]
        path = write_atomic(self.next_input_path(), "".join(line + "\n" for line in lines))
        log.info("batch: %d pending requests exported to %s", len(lines), path)
        self._pending.clear()
        return path

    def close(self) -> None:
        if self._pending:
            log.warning("batch: %d pending requests were not exported (end_cycle was not called)", len(self._pending))
