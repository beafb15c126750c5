"""Evaluation: sacrebleu scores with signatures, and validation on held-out data."""
