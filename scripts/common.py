"""Arguments every verb shares: -c CONFIG, --output, dotted.key=value overrides."""
from __future__ import annotations

import argparse


def add_common(p: argparse.ArgumentParser, *, config_required: bool = True) -> None:
    p.add_argument("-c", "--config", required=config_required, help="a flat YAML config (configs/*.yaml)")
    p.add_argument("--output", default=None, help="where to write (overrides the config's output)")
    p.add_argument("overrides", nargs="*", default=[], help="dotted.key=value overrides, e.g. protocol.rounds=3")
