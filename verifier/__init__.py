"""Accuracy verification: is the compiled experiment's answer the eager answer?

`verify_experiment(harness)` runs inside the experiment's child after timing and returns
the record's `verification` block; `compare` is the pure comparison it uses. The harness is
anything that satisfies `Subject` (the child's ExperimentDriver does): the verifier never
imports the child.
"""

from verifier.closeness import (DEFERRED, Comparison, Leaf, ReferenceNeeded, UnsupportedOutput,
                                compare, identical)
from verifier.run import Verification, verify_experiment
from verifier.subject import Device, Subject
from verifier.tolerances import Context, Policy, policy_for

__all__ = ["DEFERRED", "Comparison", "Context", "Device", "Leaf", "Policy", "ReferenceNeeded",
           "Subject", "UnsupportedOutput", "Verification", "compare", "identical", "policy_for", "verify_experiment"]
