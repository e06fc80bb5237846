"""The step-synchronous runner: every pending sample's next step goes out as one batch per backend.

Finished transcripts are appended atomically to the output file; failed items go to
``<output>.errors.jsonl`` (and are retried on the next run); a rerun skips finished ids. With the batch
backend a sample whose next call is unanswered is left pending; the run ends by exporting those calls.
"""
from __future__ import annotations

import hashlib
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from agents.backends.base import Backend, ChatRequest, Completion
from agents.content import prepare
from agents.protocols.base import Call, Context, Protocol
from data.config import Price
from data.jsonl import JsonlAppender, RecordError, finished_ids
from data.records import ProtocolInfo, Provenance, Sample, Transcript, Turn, Usage, UsageTotals


def transcript_id(sample_id: str, protocol: str, ident_hash: str) -> str:
    return f"{protocol}:{ident_hash[:10]}:{sample_id}"


def custom_id(tid: str, call: Call) -> str:
    return f"{tid}|{call.step}|{call.role}|{call.round}|{call.attempt}"


def errors_path(output: Path | str) -> Path:
    p = Path(output)
    return p.with_name(p.stem + ".errors.jsonl")


@dataclass
class RunStats:
    total: int = 0
    skipped: int = 0  # already finished in the output file
    done: int = 0
    failed: int = 0
    pending: int = 0  # waiting on a batch cycle
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    repaired_tail: str | None = None
    exports: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return (self.prompt_tokens + self.completion_tokens) / self.wall_s if self.wall_s else 0.0

    @property
    def completion_tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def items_per_s(self) -> float:
        return self.done / self.wall_s if self.wall_s else 0.0


@dataclass
class _Item:
    sample: Sample
    transcript: Transcript
    gen: object
    calls: list[Call]
    t0: float


class Runner:
    def __init__(
        self,
        protocol: Protocol,
        backends: dict[str, Backend],
        *,
        roles: dict[str, str] | None = None,
        output: Path | str,
        ident_hash: str,
        config_hash: str,
        resolved_config: dict | None = None,
        pricing: dict[str, Price] | None = None,
        max_chars: int = 6000,
        images: bool = True,
        resources: dict | None = None,
        window: int = 256,
        progress: bool = False,
        tool_version: str = "0.1.0",
        git_sha: str | None = None,
    ):
        if "default" not in backends and not all(r in (roles or {}) for r in protocol.roles):
            raise ValueError("backends must include 'default' unless every role is bound in roles")
        self.protocol, self.backends, self.roles = protocol, backends, dict(roles or {})
        for role, name in self.roles.items():
            if name not in backends:
                raise ValueError(f"roles.{role}: backend {name!r} is not defined in backends")
        self.output = Path(output)
        self.ident_hash, self.config_hash = ident_hash, config_hash
        self.pricing = pricing or {}
        self.max_chars, self.images = max_chars, images
        self.resources = resources or {}
        self.window = window
        self.progress = progress
        self.tool_version, self.git_sha = tool_version, git_sha
        self.protocol_info = ProtocolInfo(name=protocol.name, version=protocol.version, rounds=protocol.rounds,
                                          config=protocol.cfg.model_dump(mode="json"))

    # ------------------------------------------------------------------ pieces
    def backend_name(self, role: str) -> str:
        return self.roles.get(role, "default")

    def new_item(self, sample: Sample) -> _Item:
        tid = transcript_id(sample.id, self.protocol.name, self.ident_hash)
        content = prepare(sample, self.max_chars)
        tr = Transcript(
            id=tid, sample=sample, protocol=self.protocol_info, truncation=dict(content.truncation),
            provenance=Provenance(tool_version=self.tool_version, git_sha=self.git_sha, config_hash=self.config_hash,
                                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds")),
        )
        if not self.images:
            tr.meta["images_off"] = True
        ctx = Context(sample=sample, content=content, transcript=tr, bound_roles=set(self.roles),
                      resources=self.resources)
        gen = self.protocol.run(ctx)
        return _Item(sample=sample, transcript=tr, gen=gen, calls=[], t0=time.perf_counter())

    def _cost(self, model: str, pt: int, ct: int, factor: float) -> float:
        p = self.pricing.get(model)
        if p is None:
            return 0.0
        return (pt * p.prompt_per_1m + ct * p.completion_per_1m) / 1e6 * factor

    def _turn(self, call: Call, comp: Completion, backend: Backend) -> Turn:
        ref = backend.ref_for(call.role) if hasattr(backend, "ref_for") else backend.ref
        return Turn(step=call.step, role=call.role, round=call.round, attempt=call.attempt, backend=ref,
                    messages=call.messages, output=comp.text, usage=Usage(prompt_tokens=comp.prompt_tokens,
                    completion_tokens=comp.completion_tokens), latency_s=round(comp.latency_s, 6),
                    cost_usd=self._cost(ref.model, comp.prompt_tokens, comp.completion_tokens,
                                        getattr(backend, "price_factor", 1.0)),
                    cached=comp.cached, error=comp.error)

    @staticmethod
    def _generate_isolated(backend: Backend, requests: list[ChatRequest]) -> list[Completion]:
        """One batch call; if the backend raises, retry one request at a time so only the culprit fails."""
        try:
            return backend.generate(requests)
        except Exception as e:  # noqa: BLE001
            if len(requests) == 1:
                return [Completion(error=f"{type(e).__name__}: {e}")]
        out = []
        for r in requests:
            try:
                out.extend(backend.generate([r]))
            except Exception as e:  # noqa: BLE001
                out.append(Completion(error=f"{type(e).__name__}: {e}"))
        return out

    def _finalize(self, item: _Item) -> Transcript:
        tr = item.transcript
        tr.usage = UsageTotals(
            prompt_tokens=sum(t.usage.prompt_tokens for t in tr.turns),
            completion_tokens=sum(t.usage.completion_tokens for t in tr.turns),
            cost_usd=round(sum(t.cost_usd for t in tr.turns), 8),
            wall_s=round(time.perf_counter() - item.t0, 4),
            calls=len(tr.turns),
        )
        return tr

    def _advance(self, item: _Item, turns: list[Turn] | None) -> str:
        """Send turns (or start); returns 'active', 'done' or raises."""
        try:
            item.calls = item.gen.send(turns) if turns is not None else next(item.gen)
        except StopIteration as stop:
            item.transcript.verdict = stop.value
            return "done"
        if not item.calls:
            raise RuntimeError(f"protocol {self.protocol.name} yielded an empty step")
        return "active"

    def _refuse_foreign(self, done_ids: set[str]) -> None:
        """One output file holds one corpus: transcripts whose id says another protocol, prompt version or
        config made them are never resumed into or appended beside (a changed config gives new ids)."""
        prefix = transcript_id("", self.protocol.name, self.ident_hash)
        foreign = sorted(i for i in done_ids if not i.startswith(prefix))
        if not foreign:
            return
        line = 0
        with Path(self.output).open(encoding="utf-8") as f:
            for n, text in enumerate(f, start=1):
                if f'"{foreign[0]}"' in text:
                    line = n
                    break
        raise RecordError(self.output, line, "id",
                          f"{len(foreign)} transcript(s) in this file were made by another protocol, prompt "
                          f"version or config (e.g. {foreign[0]!r}; this run writes ids {prefix + '…'!r}); "
                          "write to another --output so two corpora never mix in one file")

    # ------------------------------------------------------------------ the loop
    def run(self, samples: list[Sample]) -> RunStats:
        stats = RunStats(total=len(samples))
        done_ids = finished_ids(self.output)
        self._refuse_foreign(done_ids)
        todo = []
        for s in samples:
            if transcript_id(s.id, self.protocol.name, self.ident_hash) in done_ids:
                stats.skipped += 1
            else:
                todo.append(s)
        writer = JsonlAppender(self.output)
        stats.repaired_tail = str(writer.repaired) if writer.repaired else None
        err_writer = JsonlAppender(errors_path(self.output))
        t_start = time.perf_counter()
        bar = _Progress(len(todo), enabled=self.progress, label=f"{self.protocol.name}")

        def fail(item: _Item, msg: str) -> None:
            item.transcript.error = msg
            err_writer.append(self._finalize(item))
            stats.failed += 1
            bar.advance(stats, failed=True)

        def finish(item: _Item) -> None:
            tr = self._finalize(item)
            writer.append(tr)
            stats.done += 1
            stats.prompt_tokens += tr.usage.prompt_tokens
            stats.completion_tokens += tr.usage.completion_tokens
            stats.cost_usd += tr.usage.cost_usd
            stats.wall_s = time.perf_counter() - t_start
            bar.advance(stats)

        def start(sample: Sample) -> _Item | None:
            item = self.new_item(sample)
            try:
                state = self._advance(item, None)
            except Exception as e:  # noqa: BLE001 - a per-item error is recorded and the run goes on
                fail(item, f"{type(e).__name__}: {e}")
                return None
            if state == "done":
                finish(item)
                return None
            return item

        queue = iter(todo)
        active: list[_Item] = []
        try:
            while True:
                while len(active) < self.window:
                    s = next(queue, None)
                    if s is None:
                        break
                    it = start(s)
                    if it is not None:
                        active.append(it)
                if not active:
                    break
                # gather this step's calls from all active items, one batch per backend
                per_backend: dict[str, list[tuple[int, int, ChatRequest]]] = {}
                for i, item in enumerate(active):
                    for j, call in enumerate(item.calls):
                        req = ChatRequest(custom_id=custom_id(item.transcript.id, call), role=call.role,
                                          messages=call.messages, max_tokens=call.max_tokens,
                                          json_mode=call.json_mode)
                        per_backend.setdefault(self.backend_name(call.role), []).append((i, j, req))
                results: dict[tuple[int, int], Completion] = {}
                for name, lst in per_backend.items():
                    lst.sort(key=lambda x: x[2].role)  # grouped by role: one adapter per run of requests
                    comps = self._generate_isolated(self.backends[name], [r for _, _, r in lst])
                    for (i, j, _), c in zip(lst, comps, strict=True):
                        results[(i, j)] = c
                still = []
                for i, item in enumerate(active):
                    comps = [results[(i, j)] for j in range(len(item.calls))]
                    if any(c.pending for c in comps):
                        stats.pending += 1
                        continue
                    turns = []
                    for call, c in zip(item.calls, comps):
                        be = self.backends[self.backend_name(call.role)]
                        turns.append(self._turn(call, c, be))
                    item.transcript.turns.extend(turns)
                    bad = [t for t, call in zip(turns, item.calls) if t.error and not call.allow_error]
                    if bad:
                        fail(item, f"backend error in step {bad[0].step} ({bad[0].role}): {bad[0].error}")
                        continue
                    try:
                        state = self._advance(item, turns)
                    except Exception as e:  # noqa: BLE001
                        tb = traceback.extract_tb(e.__traceback__)[-1]
                        fail(item, f"{type(e).__name__}: {e} (at {Path(tb.filename).name}:{tb.lineno})")
                        continue
                    if state == "done":
                        finish(item)
                    else:
                        still.append(item)
                active = still
                bar.update_tokens(stats, active, t_start)
        finally:
            writer.close()
            err_writer.close()
            bar.close()
            for be in self.backends.values():
                end = getattr(be, "end_cycle", None)
                if end is not None:
                    path = end()
                    if path:
                        stats.exports.append(str(path))
        stats.wall_s = time.perf_counter() - t_start
        return stats


class _Progress:
    """A rich progress bar with items/s and tokens/s (off in tests and non-interactive runs)."""

    def __init__(self, total: int, enabled: bool, label: str):
        self.enabled = enabled and total > 0
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("{task.fields[rate]}"), transient=False)
        self.task = self.p.add_task(label, total=total, rate="")
        self.p.start()
        self.t0 = time.perf_counter()

    def _rate(self, stats: RunStats) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        tok = stats.prompt_tokens + stats.completion_tokens
        return (f"{stats.done / dt:.2f} items/s · {tok / dt:.0f} tok/s · "
                f"{stats.completion_tokens / dt:.1f} gen tok/s · failed {stats.failed}")

    def advance(self, stats: RunStats, failed: bool = False) -> None:
        if self.enabled:
            self.p.update(self.task, advance=1, rate=self._rate(stats))

    def update_tokens(self, stats: RunStats, active, t_start) -> None:
        if self.enabled:
            self.p.update(self.task, rate=self._rate(stats))

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def ident_hash_of(resolved: dict) -> str:
    """What makes a transcript id: the protocol section, backends, role bindings and content handling.

    Not the output path, limit or dataset options: those do not change what a transcript contains.
    """
    import json

    ident_keys = ("kind", "model", "gguf_file", "revision", "adapters", "temperature", "top_p", "dtype",
                  "load_in_4bit", "load_in_8bit")
    backends = {name: {k: v for k, v in (b or {}).items() if k in ident_keys}
                for name, b in (resolved.get("backends") or {}).items()}
    keep = {"protocol": resolved.get("protocol"), "backends": backends, "roles": resolved.get("roles"),
            "content": resolved.get("content"), "protocol_identity": resolved.get("protocol_identity")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()
