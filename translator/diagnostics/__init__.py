"""Attention you can see: capture the weights, measure the heads, draw them, align words."""
