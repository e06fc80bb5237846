"""Config -> runner: the one place that wires a GenerateConfig into backends, protocol and runner.

``tribunal generate`` and every later stage that runs a protocol (baselines, the student harness) go
through ``build_runner`` so they all get batching, resume and cost accounting the same way.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from agents.backends.factory import build_backend
from agents.protocols.base import build_protocol
from agents.runner import Runner, ident_hash_of
from data.config import GenerateConfig, config_hash

TOOL_VERSION = "0.1.0"


def git_sha() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        sha = out.stdout.strip()
        if out.returncode != 0 or not sha:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def build_runner(cfg: GenerateConfig, *, path: str = "<config>", backends: dict | None = None,
                 resources: dict | None = None, output: str | None = None) -> Runner:
    """``backends`` may be passed in (tests bind scripted backends by name); otherwise built from config."""
    protocol = build_protocol(cfg.protocol, path)
    for role in cfg.roles:
        if role not in protocol.roles:
            raise ValueError(f"{path}: roles.{role}: protocol {protocol.name} has no role {role!r} "
                             f"(roles: {', '.join(protocol.roles)})")
    if backends is None:
        shared: dict = {}
        backends = {name: build_backend(b, shared=shared) for name, b in cfg.backends.items()}
    resolved = cfg.model_dump(mode="json")
    resolved["protocol"] = protocol.cfg.model_dump(mode="json")
    resolved["protocol_identity"] = protocol.identity()
    resources = dict(resources or {})
    if cfg.library and "library" not in resources:
        from agents.library import CaseLibrary

        resources["library"] = CaseLibrary.load(cfg.library)
    return Runner(
        protocol, backends, roles=cfg.roles, output=output or cfg.output, ident_hash=ident_hash_of(resolved),
        config_hash=config_hash(resolved), resolved_config=resolved, pricing=cfg.pricing,
        max_chars=cfg.content.max_chars, images=cfg.content.images, resources=resources,
        window=cfg.window, progress=cfg.progress, tool_version=TOOL_VERSION, git_sha=git_sha(),
    )
