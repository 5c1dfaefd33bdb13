"""Diagnosis: from a Timeline to a verdict, a phase, a component and the evidence for them — the
rules (rules/ as data), the phase from the most trusted evidence, and the kind of job that failed.
May import: memory, evidence, read, core."""
