"""Importers: models trained elsewhere, read into mtkit bundles (`mtkit import`)."""
