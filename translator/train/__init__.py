"""Training: the loop, the learning-rate schedule, and metric logging."""
