"""Step 3: the base model, GRPO training and what keeps a run resumable and self-stopping."""
