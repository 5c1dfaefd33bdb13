"""Plans and patches: from a diagnosis to what to change — the budget Spec of the run, the ordered
moves with their savings, the moves that exclude each other, and the patch of the user's own config
or command line. May import: diagnosis, memory, evidence, read, core."""
