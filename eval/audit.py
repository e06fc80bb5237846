"""The per-item audit view: one transcript rendered as text (rich) or as a self-contained HTML page.

Protocol-agnostic: it shows the sample, every turn that exists (step, role, round, attempt, backend,
output, parsed fields, parse errors and fallbacks), the score trajectory when turns carry
``parsed["score"]``, the retrieval, the verdict with the rule applied and its evidence, and usage.
The content under review is data: in text it is shown with control characters made visible and no rich
markup interpreted; in HTML every string is escaped and the page forbids scripts (Content-Security-Policy).
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agents.runner import errors_path
from data.jsonl import iter_records
from data.records import Transcript

# control characters (but newline and tab) and bidirectional overrides would let content restyle a terminal
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class NotFound(LookupError):
    pass


def visible(text: str) -> str:
    """Control characters as visible escapes (\\x1b), so content cannot drive the terminal."""
    return _UNSAFE_CHARS.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def find_transcript(path: str | Path, ident: str) -> tuple[Transcript, str]:
    """(transcript, "file:line") for the id or sample id ``ident``, from the file or its errors file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: transcript file not found")
    candidates = [path] + ([errors_path(path)] if errors_path(path).exists() else [])
    seen = []
    for f in candidates:
        hits = []
        with f.open(encoding="utf-8") as fh:
            lines = [i for i, line in enumerate(fh, 1) if line.strip()]
        for lineno, tr in zip(lines, iter_records(f, Transcript), strict=True):
            if ident in (tr.id, tr.sample.id):
                hits.append((tr, f"{f}:{lineno}"))
            elif len(seen) < 5:
                seen.append(tr.sample.id)
        if hits:
            return hits[-1] if f != path else hits[0]
    hint = f" (sample ids there include: {', '.join(seen)})" if seen else ""
    raise NotFound(f"{path}: no transcript with id or sample id {ident!r}{hint}")


def score_trajectory(tr: Transcript) -> dict[str, dict[int, float]]:
    """role -> {round: score} from turns with a numeric parsed["score"] (the last attempt of a round wins)."""
    out: dict[str, dict[int, float]] = {}
    for t in sorted(tr.turns, key=lambda t: (t.round, t.attempt)):
        s = t.parsed.get("score")
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            out.setdefault(t.role, {})[t.round] = float(s)
    return out


def adjudication_turn(tr: Transcript):
    """The last turn whose parsed fields name a rule (the arbiter/judge), or None."""
    for t in reversed(tr.turns):
        if t.parsed.get("rule") is not None:
            return t
    return None


def _fmt(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _sample_fields(tr: Transcript) -> list[tuple[str, str]]:
    s = tr.sample
    rows = [
        ("sample id", s.id),
        ("source", s.source),
        ("gold label", str(s.label)),
        ("category", str(s.category)),
        ("modality", s.modality),
        ("subject", s.subject),
    ]
    if tr.truncation:
        rows.append(("truncated", ", ".join(f"{k}: {v} chars cut" for k, v in tr.truncation.items())))
    return rows


def _content_fields(tr: Transcript) -> list[tuple[str, str]]:
    s = tr.sample
    return [
        (k, v)
        for k, v in (
            ("text", s.text),
            ("prompt", s.prompt),
            ("response", s.response),
            ("image", s.image),
            ("image description", s.image_description),
        )
        if v
    ]


def _turn_title(i: int, t) -> str:
    be = f"{t.backend.kind}:{t.backend.model}" + (f"+{t.backend.adapter}" if t.backend.adapter else "")
    return f"#{i} {t.step} · role {t.role} · round {t.round} · attempt {t.attempt} · {be}"


def _turn_facts(t) -> list[tuple[str, str]]:
    rows = [(k, _fmt(v)) for k, v in t.parsed.items()]
    if t.parse_error:
        rows.append(("parse_error", t.parse_error))
    if t.fallback_used:
        rows.append(("fallback_used", "yes"))
    if t.error:
        rows.append(("backend error", t.error))
    rows.append(
        (
            "usage",
            f"{t.usage.prompt_tokens} prompt + {t.usage.completion_tokens} completion tokens, "
            f"{t.latency_s:.3f} s, ${t.cost_usd:.6f}" + (", cached" if t.cached else ""),
        )
    )
    return rows


def _verdict_fields(tr: Transcript) -> list[tuple[str, str]]:
    v = tr.verdict
    rows = [("label", str(v.label)), ("score", _fmt(v.score)), ("rule applied", str(v.rule))]
    rows += [(k, _fmt(getattr(v, k))) for k in ("ordinal", "score10", "band") if getattr(v, k) is not None]
    adj = adjudication_turn(tr)
    if adj is not None:
        findings = {k: x for k, x in adj.parsed.items() if k not in ("rule", "label", "evidence")}
        rows.append(
            (
                "findings",
                f"{adj.role} ({adj.step}): " + ", ".join(f"{k}={_fmt(x)}" for k, x in findings.items()),
            )
        )
    rows.append(("rationale", v.rationale))
    if v.parse_error:
        rows.append(("parse_error", v.parse_error))
    if v.fallback_used:
        rows.append(("fallback_used", "yes"))
    return rows


def _usage_fields(tr: Transcript) -> list[tuple[str, str]]:
    u, p = tr.usage, tr.provenance
    rows = [
        ("tokens", f"{u.prompt_tokens} prompt + {u.completion_tokens} completion in {u.calls} calls"),
        ("cost", f"${u.cost_usd:.6f}"),
        ("wall", f"{u.wall_s:.2f} s"),
        ("turn latency (sum)", f"{sum(t.latency_s for t in tr.turns):.3f} s"),
        (
            "provenance",
            (
                f"tribunal {p.tool_version}, git {p.git_sha or 'unknown'}, config {p.config_hash}, "
                f"created {p.created_at}"
            ),
        ),
    ]
    if tr.error:
        rows.append(("item error", tr.error))
    return rows


# ------------------------------------------------------------------ text (rich)
def _kv(rows: list[tuple[str, str]]) -> Table:
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for k, v in rows:
        t.add_row(Text(visible(k)), Text(visible(v)))
    return t


def renderable(tr: Transcript, *, messages: bool = False) -> Group:
    proto = tr.protocol
    head = Text(
        visible(f"Transcript {tr.id}  ·  protocol {proto.name} ({proto.version}, {proto.rounds} rounds)"),
        style="bold",
    )
    parts = [
        head,
        Panel(_kv(_sample_fields(tr) + _content_fields(tr)), title=Text("Sample"), box=box.ROUNDED),
    ]
    if tr.retrieval:
        rt = Table("case", "similarity", "label", "summary", box=box.SIMPLE)
        for r in tr.retrieval:
            rt.add_row(
                Text(visible(r.case_id)),
                f"{r.similarity:.3f}",
                Text(str(r.label)),
                Text(visible(r.summary or "")),
            )
        parts.append(Panel(rt, title=Text("Retrieval"), box=box.ROUNDED))
    else:
        parts.append(Text("Retrieval: none"))
    for i, t in enumerate(tr.turns, 1):
        body = [Text("output:", style="bold"), Text(visible(t.output) or "(empty)"), _kv(_turn_facts(t))]
        if messages:
            for m in t.messages:
                body.append(Text(visible(f"--- message ({m.role}) ---\n{m.content}"), style="dim"))
        style = "red" if (t.error or t.parse_error) else "blue"
        parts.append(
            Panel(Group(*body), title=Text(visible(_turn_title(i, t))), border_style=style, box=box.ROUNDED)
        )
    traj = score_trajectory(tr)
    if traj:
        rounds = sorted({r for d in traj.values() for r in d})
        tt = Table("role", *[f"round {r}" for r in rounds], box=box.SIMPLE)
        for role, d in traj.items():
            tt.add_row(Text(visible(role)), *[f"{d[r]:.2f}" if r in d else "—" for r in rounds])
        parts.append(Panel(tt, title=Text("Scores per round"), box=box.ROUNDED))
    ev = tr.verdict.evidence
    vbody = [_kv(_verdict_fields(tr)), Text("evidence:", style="bold")]
    vbody += [Text(visible(f"  • {e}")) for e in ev] or [Text("  (none cited)")]
    parts.append(Panel(Group(*vbody), title=Text("Verdict"), border_style="green", box=box.ROUNDED))
    parts.append(Panel(_kv(_usage_fields(tr)), title=Text("Usage"), box=box.ROUNDED))
    return Group(*parts)


def render_text(tr: Transcript, *, messages: bool = False, width: int = 110) -> str:
    console = Console(record=True, file=io.StringIO(), width=width, color_system=None)
    console.print(renderable(tr, messages=messages))
    return console.export_text()


# ------------------------------------------------------------------ HTML
_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.2em}h2{font-size:1.05em;margin-top:1.6em}
section.turn{border:1px solid #bbd;border-radius:6px;padding:.5em 1em;margin:.8em 0}
section.turn.bad{border-color:#d99}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f8;padding:.5em;border-radius:4px}
table{border-collapse:collapse}
td,th{padding:.2em .6em;vertical-align:top;text-align:left;border-bottom:1px solid #eee}
th{white-space:nowrap}.verdict{border-left:4px solid #4a4;padding-left:1em}"""


_CSP = "default-src 'none'; style-src 'unsafe-inline'"  # no scripts, no remote loads


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _html_kv(rows: list[tuple[str, str]], pre: tuple[str, ...] = ()) -> str:
    cells = []
    for k, v in rows:
        val = f"<pre>{_e(v)}</pre>" if k in pre or "\n" in str(v) else _e(v)
        cells.append(f"<tr><th>{_e(k)}</th><td>{val}</td></tr>")
    return "<table>" + "".join(cells) + "</table>"


def render_html(tr: Transcript) -> str:
    proto = tr.protocol
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">",
        f"<title>{_e(tr.id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Transcript {_e(tr.id)}</h1>",
        f"<p>protocol {_e(proto.name)} ({_e(proto.version)}, {proto.rounds} rounds)</p>",
        "<h2>Sample</h2>",
        _html_kv(_sample_fields(tr)),
        _html_kv(_content_fields(tr), pre=("text", "prompt", "response", "image description")),
        "<h2>Retrieval</h2>",
    ]
    if tr.retrieval:
        out.append(
            "<table><tr><th>case</th><th>similarity</th><th>label</th><th>summary</th></tr>"
            + "".join(
                f"<tr><td>{_e(r.case_id)}</td><td>{r.similarity:.3f}</td><td>{_e(r.label)}</td>"
                f"<td>{_e(r.summary or '')}</td></tr>"
                for r in tr.retrieval
            )
            + "</table>"
        )
    else:
        out.append("<p>none</p>")
    out.append("<h2>Turns</h2>")
    for i, t in enumerate(tr.turns, 1):
        msgs = "".join(
            f"<p><b>{_e(m.role)}</b>"
            + (f" (images: {_e(', '.join(m.images))})" if m.images else "")
            + f"</p><pre>{_e(m.content)}</pre>"
            for m in t.messages
        )
        bad = " bad" if (t.error or t.parse_error) else ""
        out.append(
            f"<section class='turn{bad}'><h3>{_e(_turn_title(i, t))}</h3><p><b>output</b></p>"
            f"<pre>{_e(t.output) or '(empty)'}</pre>{_html_kv(_turn_facts(t))}"
            f"<details><summary>messages sent ({len(t.messages)})</summary>{msgs}</details></section>"
        )
    traj = score_trajectory(tr)
    if traj:
        rounds = sorted({r for d in traj.values() for r in d})
        head = "".join(f"<th>round {r}</th>" for r in rounds)
        body = "".join(
            f"<tr><th>{_e(role)}</th>"
            + "".join(f"<td>{d[r]:.2f}</td>" if r in d else "<td>—</td>" for r in rounds)
            + "</tr>"
            for role, d in traj.items()
        )
        out.append(f"<h2>Scores per round</h2><table><tr><th>role</th>{head}</tr>{body}</table>")
    ev = "".join(f"<li>{_e(e)}</li>" for e in tr.verdict.evidence) or "<li>(none cited)</li>"
    out.append(
        f"<h2>Verdict</h2><div class='verdict'>{_html_kv(_verdict_fields(tr), pre=('rationale',))}"
        f"<p><b>evidence</b></p><ul>{ev}</ul></div>"
    )
    out.append("<h2>Usage</h2>" + _html_kv(_usage_fields(tr)))
    out.append("</body></html>\n")
    return "\n".join(out)
