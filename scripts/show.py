"""tribunal show TRANSCRIPT_FILE --id ID [--html OUT.html]: the audit view of one debate.

ID is a transcript id or a sample id; the run's errors file is searched too. Without --html the debate
is printed as text; with it a self-contained HTML page is written (all content escaped, no scripts).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a transcripts .jsonl file")
    p.add_argument("--id", required=True, help="a transcript id or a sample id")
    p.add_argument("--html", default=None, help="write an HTML page here instead of printing text")
    p.add_argument("--messages", action="store_true", help="text view: also print the exact messages sent")


def run(args) -> int:
    from rich.console import Console

    from eval.audit import NotFound, find_transcript, render_html, renderable
    from eval.report import write_atomic

    try:
        tr, where = find_transcript(args.path, args.id)
    except NotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.html:
        write_atomic(args.html, render_html(tr))
        print(f"{where}: wrote {args.html}")
        return 0
    console = Console()
    console.print(f"{where}", markup=False, highlight=False)
    console.print(renderable(tr, messages=args.messages))
    return 0
