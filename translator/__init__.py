"""translator: train, evaluate and serve encoder-decoder Transformers for machine translation."""

__version__ = "0.1.0"
