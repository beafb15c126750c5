"""Reports on runs and models: `mtkit info` and `mtkit plot`."""
