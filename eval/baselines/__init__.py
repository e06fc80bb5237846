"""Baselines: runnable systems that write the same transcripts as the debate protocols.

Each baseline is a ``Protocol`` registered in ``agents.protocols`` and run by ``tribunal generate -c
configs/baseline_<name>.yaml`` through the same runner (batching, resume, errors file, cost and
latency accounting), so bench scores them exactly like the teacher and the students:

* ``keyword`` - keyword / regex blocklist, no model (keyword.py; list in configs/keyword_blocklist.yaml)
* ``single_judge`` - one zero-shot judge prompt on a chat backend, optionally with a policy text and
  few-shot examples (single_judge.py)
* ``llamaguard3``, ``shieldgemma``, ``wildguard`` - guard models in their official prompt formats, run by
  a local next-token scorer (guards.py; llamaguard.py, shieldgemma.py, wildguard.py)
* ``moderation`` - the OpenAI moderation endpoint through the openai SDK (moderation.py)

Importing this package registers them; heavy libraries (torch, transformers, openai) load on first use.
"""
from eval.baselines import keyword, llamaguard, moderation, shieldgemma, single_judge, wildguard  # noqa: F401
