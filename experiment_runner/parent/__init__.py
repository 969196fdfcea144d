"""The runner's own process: plan, launch one child per experiment, write every record.

Never imports torch, model code or `experiment_runner.child`."""
