"""Documents, not only lines: sentence splitting, placeholder protection and HTML markup
around a sentence-level model (pure text processing; pipeline.py holds the order of work)."""
