"""The command line: `oom-doctor diagnose|budget|triage|rules|explain|run`, the one place that turns
results into exit codes and text on a terminal. May import every stage; nothing imports it."""

from .main import cli, main  # noqa: F401  (the console script is advisor.cli:main)
