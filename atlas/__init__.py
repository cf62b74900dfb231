"""Attention Atlas: a queryable store of a BERT-style encoder's attention over an annotated corpus."""

__version__ = "0.1.0"
