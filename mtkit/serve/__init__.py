"""`mtkit serve`: the HTTP server, its API, batcher, processes, metrics and page."""
