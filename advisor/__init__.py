"""oom-doctor: read a failed fine-tuning log, say why it ran out of memory and what to change."""

__version__ = "0.1.0"
