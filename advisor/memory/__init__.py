"""Memory: the arithmetic of a run — the model and GPU catalogues, the budget per component on one
card, and which of the run's tensors a failed request matches. May import: read, core (never the
evidence or the diagnosis: it computes from facts, whoever found them)."""
