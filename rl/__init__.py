"""Reinforcement fine-tuning on measured speedups: rewards, prompts, data, trainers."""
