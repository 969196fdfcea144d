#!/usr/bin/env bash
# The PyTorch/XLA environment, built from scratch: torch 2.9.0 + torch_xla 2.9.0 (~90 s,
# ~7 GB), the project without its dependencies (they would replace torch), then the
# project's pure dependencies with torch pinned so nothing can upgrade it. Then the XLA
# tests: real lazy-tensor and openxla experiments on the CPU PJRT device.
#
#   XLA_VENV  where to build the environment (default: .venv-xla in the repository,
#             git-ignored); it is removed and rebuilt on every run.
#   PYTHON    the interpreter that creates it (default: python3; torch_xla 2.9.0 has
#             wheels for CPython 3.10 to 3.13).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${XLA_VENV:-$PWD/.venv-xla}
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
echo "torch==2.9.0" > "$pins"

echo "xla: building $venv"
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet torch==2.9.0 torch_xla==2.9.0
"$venv/bin/python" -m pip install --quiet --no-deps -e .
# jsonschema: tests/conftest.py validates every record the tests' runs wrote against the record schema;
# psutil: it also ends, after every test, the processes that test started.
"$venv/bin/python" -m pip install --quiet -c "$pins" numpy tqdm tabulate pytest pytest-timeout pytest-xdist jsonschema psutil
"$venv/bin/python" -c "import torch, torch_xla; print('xla: torch', torch.__version__, 'torch_xla', torch_xla.__version__)"

tests="tests/child/test_xla.py tests/child/test_xla_forkserver.py tests/core/test_reference_keys.py"
echo "xla: PJRT_DEVICE=CPU pytest -m xla $tests"
PJRT_DEVICE=CPU "$venv/bin/python" -m pytest -m xla $tests
