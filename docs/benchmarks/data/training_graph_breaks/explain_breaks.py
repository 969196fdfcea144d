"""One model's harness-style training graph-break count (benchmarks/training_graph_breaks.py's
count(), the child's replay), with the reasons it counted (`counters["graph_break"]` gathered
around the replay) and the torch/timm/transformers it ran with, as one JSON file.

    PYTHONPATH=. TORCH_LOGS=graph_breaks python docs/benchmarks/data/training_graph_breaks/explain_breaks.py \
        timm mobilevit_s aot_eager /tmp/gb/mobilevit_s.json 2> /tmp/gb/mobilevit_s.log

HIDE_TORCHVISION=1 hides torchvision (the development venv's 0.28 does not import on torch 2.13,
and transformers 5.1.0 imports it where it finds it; 5.24 does not, nor does timm 1.0.31).
"""
import importlib
import json
import os
import sys
from pathlib import Path

if os.environ.get("HIDE_TORCHVISION"):
    sys.modules["torchvision"] = None  # importlib.util.find_spec says None, `import torchvision` fails
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))
import training_graph_breaks as tgb  # noqa: E402
from experiment_runner.child.instrument import dynamo  # noqa: E402

captured = {}
counted = dynamo._breaks_counted


def with_reasons(replay):
    from torch._dynamo.utils import counters

    def wrapped():
        before = dict(counters["graph_break"])
        try:
            replay()
        finally:
            after = dict(counters["graph_break"])
            captured["reasons"] = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    return counted(wrapped)


dynamo._breaks_counted = with_reasons
suite, model, job, out = sys.argv[1:5]
row = {"suite": suite, "model": model, "job": job, **tgb.count(suite, model, job), "reasons": captured.get("reasons")}
import torch  # noqa: E402

row["versions"] = {"torch": torch.__version__}
for lib in ("timm", "transformers"):
    try:
        module = importlib.import_module(lib)
        row["versions"][lib], row["versions"][lib + "_file"] = module.__version__, module.__file__
    except Exception as exc:  # noqa: BLE001 - a library the suite does not need may not import
        row["versions"][lib] = repr(exc)
Path(out).write_text(json.dumps(row, indent=1) + "\n")
print(json.dumps(row, indent=1))
