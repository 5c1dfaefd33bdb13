"""Triage: many reports -> groups of the same failure, with counts, a representative and a reply for
each report; which files to read, the local and the Ray engine, issue exports, week-over-week
comparisons and the report's formats. May import: pipeline, render and everything below them."""
