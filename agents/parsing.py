"""Tolerant output parsing: JSON first, a pattern second, then an explicit parse error. Never raises."""
from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_NUM = r"([-+]?\d+(?:\.\d+)?)\s*(%?)"


def extract_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in the text (fenced or bare), or None."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        start = cand.find("{")
        while start >= 0:
            depth, in_str, esc = 0, False, False
            for i in range(start, len(cand)):
                c = cand[i]
                if in_str:
                    if esc:
                        esc = False
                    elif c == "\\":
                        esc = True
                    elif c == '"':
                        in_str = False
                elif c == '"':
                    in_str = True
                elif c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        try:
                            obj = json.loads(cand[start : i + 1])
                        except json.JSONDecodeError:
                            break
                        if isinstance(obj, dict):
                            return obj
                        break
            start = cand.find("{", start + 1)
    return None


def _to_unit(value: Any, pct: bool = False) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if pct:
        v /= 100.0
    if v != v or v < 0.0 or v > 1.0:  # nan or out of range: not a score
        return None
    return v


def parse_unit_score(text: str, keys: tuple[str, ...] = ("risk_score", "score")) -> tuple[float | None, str | None]:
    """A score in [0, 1]. Returns (score, how) with how in {"json", "pattern"} or (None, None)."""
    obj = extract_json(text)
    if obj:
        for k in keys:
            if k in obj:
                v = _to_unit(obj[k])
                if v is not None:
                    return v, "json"
    names = "|".join(re.escape(k).replace("_", "[ _-]?") for k in keys) + r"|risk|S"
    for m in re.finditer(rf"(?:{names})\s*(?:\(S\))?\s*[:=]\s*\**\s*{_NUM}", text, re.IGNORECASE):
        v = _to_unit(m.group(1), pct=m.group(2) == "%")
        if v is not None:
            return v, "pattern"
    return None, None


def parse_int_in(text: str, keys: tuple[str, ...], lo: int, hi: int) -> tuple[int | None, str | None]:
    obj = extract_json(text)
    if obj:
        for k in keys:
            if k in obj:
                try:
                    v = int(float(obj[k]))
                except (TypeError, ValueError):
                    continue
                if lo <= v <= hi:
                    return v, "json"
    names = "|".join(re.escape(k).replace("_", "[ _-]?") for k in keys)
    for m in re.finditer(rf"(?:{names})\s*[:=]\s*\**\s*(\d+)", text, re.IGNORECASE):
        v = int(m.group(1))
        if lo <= v <= hi:
            return v, "pattern"
    return None, None


def parse_bool(text: str, key: str) -> tuple[bool | None, str | None]:
    obj = extract_json(text)
    if obj and key in obj:
        v = obj[key]
        if isinstance(v, bool):
            return v, "json"
        if isinstance(v, str) and v.strip().lower() in {"true", "yes", "false", "no"}:
            return v.strip().lower() in {"true", "yes"}, "json"
    pat = re.escape(key).replace("_", "[ _-]?")
    m = re.search(rf"{pat}\W{{0,4}}\s*[:=]?\s*\**\s*(true|false|yes|no)\b", text, re.IGNORECASE)
    if m:
        return m.group(1).lower() in {"true", "yes"}, "pattern"
    return None, None


def parse_choice(text: str, key: str, choices: tuple[str, ...]) -> tuple[str | None, str | None]:
    """One of ``choices`` (case-insensitive): the JSON field, else '<key>: <choice>', else a lone mention."""
    lowered = {c.lower(): c for c in choices}
    obj = extract_json(text)
    if obj and isinstance(obj.get(key), str) and obj[key].strip().lower() in lowered:
        return lowered[obj[key].strip().lower()], "json"
    alt = "|".join(re.escape(c) for c in sorted(choices, key=len, reverse=True))
    pat = re.escape(key).replace("_", "[ _-]?")
    m = re.search(rf"{pat}\W{{0,4}}\s*[:=]?\s*\**\s*\"?({alt})\b", text, re.IGNORECASE)
    if m:
        return lowered[m.group(1).lower()], "pattern"
    found = {lowered[x.lower()] for x in re.findall(rf"\b({alt})\b", text, re.IGNORECASE)}
    if len(found) == 1:
        return found.pop(), "pattern"
    return None, None


def parse_str_list(text: str, key: str) -> list[str]:
    obj = extract_json(text)
    if obj and isinstance(obj.get(key), list):
        return [str(x) for x in obj[key] if str(x).strip()]
    if obj and isinstance(obj.get(key), str) and obj[key].strip():
        return [obj[key].strip()]
    return []


def parse_str(text: str, key: str) -> str | None:
    obj = extract_json(text)
    if obj and isinstance(obj.get(key), str):
        return obj[key]
    return None
