"""Files: crash-safe writes and reading text."""
