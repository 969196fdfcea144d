"""A child lost with its node (a remote executor's report) still gets one classified record."""

from experiment_runner.core.record import ChildOutcome, classify_death


def test_a_lost_child_is_crashed_with_the_reason() -> None:
    status, error = classify_death(ChildOutcome(None, None, lost_reason="node lost",
                                                lost_detail="NodeDiedError: Task failed because the node died"), None)
    assert status == "crashed" and error["reason"] == "node lost" and error["type"] == "Lost"


def test_a_child_killed_by_the_engine_for_memory_is_oom() -> None:
    # What Ray says when its memory monitor kills a task's worker (seen on a loaded machine).
    detail = "OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory."
    status, error = classify_death(ChildOutcome(None, None, lost_reason="task failed on its node",
                                                lost_detail=detail), None)
    assert status == "oom" and error["reason"] == "task failed on its node"
