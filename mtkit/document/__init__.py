"""Documents, not only lines: sentence splitting and placeholder protection around a
sentence-level model (pure text processing; pipeline.py holds the order of work)."""
