"""Data: text files, SentencePiece tokenizers, binarised arrays, corpora and batches."""
