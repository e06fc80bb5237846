"""What a protocol is: a per-sample generator that yields the calls of its next step.

A protocol reads top to bottom, one sample at a time::

    turns = yield [Call(step="strict", role="strict", round=1, messages=...)]

The runner drives every pending sample's generator in lockstep: it gathers the yielded calls of all
samples, sends them to the backends as one batch per backend (grouped by role), and sends each sample
its turns back. Branching is plain Python (only the samples that need a step yield a call for it). The
generator returns the ``Verdict``. Because a sample's path depends only on the replies it got, the batch
backend can replay a sample from stored replies and stop at the first unanswered call.
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agents.content import PreparedContent
from data.config import Cfg
from data.records import Message, Sample, Transcript, Turn, Verdict


@dataclass
class Call:
    step: str
    role: str
    messages: list[Message]
    round: int = 0
    attempt: int = 0
    max_tokens: int = 256
    json_mode: bool = False
    allow_error: bool = False  # the protocol handles a failed call itself (e.g. VLM -> placeholder)


@dataclass
class Context:
    sample: Sample
    content: PreparedContent
    transcript: Transcript
    bound_roles: set[str] = field(default_factory=set)  # roles explicitly bound to a backend in config
    resources: dict[str, Any] = field(default_factory=dict)  # e.g. {"library": CaseLibrary}


ProtocolRun = Generator[list[Call], list[Turn], Verdict]


class ProtocolConfig(Cfg):
    name: str
    max_tokens: dict[str, int] = {}  # per role; the protocol's defaults otherwise


class Protocol:
    name: ClassVar[str]
    version: ClassVar[str]  # bump on any prompt change: transcripts record it
    roles: ClassVar[tuple[str, ...]]
    Config: ClassVar[type[ProtocolConfig]]
    default_max_tokens: ClassVar[dict[str, int]] = {}

    def __init__(self, cfg: ProtocolConfig):
        self.cfg = cfg

    @property
    def rounds(self) -> int:
        return int(getattr(self.cfg, "rounds", 0))

    def identity(self) -> dict[str, Any]:
        """What, besides its config, makes this protocol's transcripts what they are: its version and the
        hashes of any files it reads (policy text, blocklist). Part of the transcript id, so a prompt or
        file change never resumes into an old corpus."""
        extra = {k: v for k, v in vars(self).items() if k.endswith("_sha") and v}
        return {"version": self.version, **extra}

    def max_tokens(self, role: str) -> int:
        return self.cfg.max_tokens.get(role, self.default_max_tokens.get(role, 256))

    def run(self, ctx: Context) -> ProtocolRun:  # pragma: no cover - abstract
        raise NotImplementedError
        yield []


REGISTRY: dict[str, type[Protocol]] = {}


def register(cls: type[Protocol]) -> type[Protocol]:
    REGISTRY[cls.name] = cls
    return cls


def build_protocol(section: dict[str, Any], path: str = "<config>") -> Protocol:
    import agents.protocols  # noqa: F401  (registers the built-in protocols)
    from data.config import ConfigError, validate_config

    name = section.get("name")
    if name not in REGISTRY:
        raise ConfigError(f"{path}: protocol.name: unknown protocol {name!r} (known: {', '.join(sorted(REGISTRY))})")
    cls = REGISTRY[name]
    try:
        cfg = validate_config(section, cls.Config, path)
    except ConfigError as e:  # re-root the locations under "protocol."
        raise ConfigError(str(e).replace(f"{path}: ", f"{path}: protocol.")) from None
    return cls(cfg)
