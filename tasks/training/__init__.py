"""Step 3: SFT and GRPO training and what keeps a run resumable and self-stopping."""
