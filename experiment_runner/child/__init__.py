"""What runs inside an experiment's own process (`python -m experiment_runner.child TASK_JSON`).

Never imported by the parent: it imports torch, model code and device runtimes."""
