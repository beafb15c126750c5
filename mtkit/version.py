"""The version of mtkit, stored in every checkpoint and export."""

__version__ = "0.1.0"
