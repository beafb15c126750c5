"""Decoding: search, engines (torch, int8, CTranslate2), translation of text, sharding."""
