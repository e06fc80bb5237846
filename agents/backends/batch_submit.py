"""Submit a Batch API input file, wait for it, and download the output next to it (needs an API key).

    python -m agents.backends.batch_submit runs/batch_teacher/input-001.jsonl

writes ``output-001.jsonl`` (and ``output-001-errors.jsonl`` for requests the API rejected; the batch
backend reads both) into the same folder. Then rerun the generate command for the next cycle.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import time
from pathlib import Path

from agents.backends.atomic import write_atomic

log = logging.getLogger(__name__)

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def output_names(input_path: Path) -> tuple[str, str]:
    m = re.match(r"^input-(\d+)\.jsonl$", input_path.name)
    tag = m.group(1) if m else input_path.stem
    return f"output-{tag}.jsonl", f"output-{tag}-errors.jsonl"


def submit_and_wait(input_path: str | Path, client, *, endpoint: str = "/v1/chat/completions",
                    poll_s: float = 60.0) -> list[Path]:
    """Upload, create the batch, poll until it ends, download its output and error files.

    ``client`` is an ``openai.OpenAI``. Returns the files written (none when the batch produced none).
    """
    input_path = Path(input_path)
    with input_path.open("rb") as f:
        uploaded = client.files.create(file=f, purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
    log.info("batch %s submitted from %s", batch.id, input_path)
    while batch.status not in TERMINAL:
        time.sleep(poll_s)
        batch = client.batches.retrieve(batch.id)
        log.info("batch %s: %s %s", batch.id, batch.status, batch.request_counts)
    if batch.status != "completed":
        log.warning("batch %s ended %s: %s", batch.id, batch.status, batch.errors)
    written = []
    for file_id, name in zip((batch.output_file_id, batch.error_file_id), output_names(input_path)):
        if file_id:
            written.append(write_atomic(input_path.with_name(name), client.files.content(file_id).text))
    return written


def main(argv: list[str] | None = None) -> int:
    import openai

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input", help="a batch input file written by the batch backend (input-NNN.jsonl)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the NAME of the variable holding the key")
    p.add_argument("--base-url", default=None)
    p.add_argument("--poll-s", type=float, default=60.0)
    args = p.parse_args(argv)
    key = os.environ.get(args.api_key_env)
    if not key:
        p.error(f"environment variable {args.api_key_env} is not set")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    client = openai.OpenAI(api_key=key, base_url=args.base_url)
    for path in submit_and_wait(args.input, client, poll_s=args.poll_s):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
