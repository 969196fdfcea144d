"""Pure Python shared by every side: the matrix, the parent/child protocol, records, stats.

Never imports torch, so the parent, the child and the analysis tools may all import it."""
