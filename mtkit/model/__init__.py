"""The Transformer, its decoder cache, the loss, and model bundles on disk."""
