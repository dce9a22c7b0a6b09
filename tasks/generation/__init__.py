"""Generating answers: batched rollouts, side-by-side decoding and answering a prompt set."""
