"""`python -m advisor.cli`: the same as the `oom-doctor` command."""

from .main import main

main()
