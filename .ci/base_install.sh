#!/usr/bin/env bash
# The base install alone (`pip install .`, no extras) in a fresh virtual environment: TensorFlow,
# TFDS and Beam are absent, and the trainer still imports, reads a dataset and trains.
# Usage: .ci/base_install.sh [WORK_DIR]   (prints the environment's size; about 1-2 min with pip's cache)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=${1:-$(mktemp -d)}
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
"$work/venv/bin/pip" install -q "$repo"
cd "$work"
venv/bin/python - <<'PY'
import importlib.util
present = [m for m in ("tensorflow", "tensorflow_datasets", "apache_beam") if importlib.util.find_spec(m)]
assert not present, f"the base install pulled {present}"
PY
# the pipeline is an extra: its command says so in one line
if venv/bin/python -m webgraph_pipeline --help 2> pipeline.err; then exit 1; fi
grep -q "needs the \[pipeline\] extra" pipeline.err
venv/bin/python -m webgraph_contract.synthetic_matrix --out data --rows 300 --cols 200 --nnz 3000 --shards 2
JAX_PLATFORMS=cpu venv/bin/python -m alx_trainer train --data data --model_dir model --dim 8 --epochs 2 \
    --eval_every 0 --no-progress
test -s model/metrics.jsonl
echo "base install: $(du -sm "$work/venv" | cut -f1) MB in $work/venv; trained $(wc -l < model/metrics.jsonl) epochs"
