"""Reading sources: what the user hands over, as bytes, text and settings — logs from files and
pipes (decoded, physical lines), run folders and their per-step records, memory snapshots, and
configs (YAML, JSON, launch command lines) with their dialect. Knows no log phrase: turning lines
into evidence is the next stage's. May import: core."""
