"""Accuracy verification: is the compiled experiment's answer the eager answer?

`verify_experiment(harness)` runs inside the experiment's child after timing and returns
the record's `verification` block; `compare` is the pure comparison it uses.
"""

from verifier.closeness import Comparison, Leaf, UnsupportedOutput, compare, identical
from verifier.run import Verification, verify_experiment
from verifier.tolerances import Context, Policy, policy_for

__all__ = ["Comparison", "Context", "Leaf", "Policy", "UnsupportedOutput", "Verification",
           "compare", "identical", "policy_for", "verify_experiment"]
