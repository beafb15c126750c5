"""Training: the update loop, run state, schedules, EMA, fine-tuning, TensorBoard."""
