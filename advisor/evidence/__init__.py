"""Evidence: the parser's single pass over a log and everything that turns lines into typed facts —
logical lines (wraps re-joined), frames with their phase tags, allocator messages and signals,
progress, markers, pasted tables, how much of a big file or pipe to read. Its product is the
Timeline. May import: read, core."""
