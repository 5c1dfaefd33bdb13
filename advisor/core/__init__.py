"""Core: what every stage stands on and nothing else — sizes and units, record types (Facts, the
catalogue's shapes), the contract's vocabularies, the data snapshot of rules/ and data/, the fixed
labels in two languages, and making text inert. Imports nothing else of advisor."""
