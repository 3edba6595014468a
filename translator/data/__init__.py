"""Corpus loading, SentencePiece tokenization and token-bounded batching."""
