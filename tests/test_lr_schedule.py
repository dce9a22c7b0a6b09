"""The learning rate stays at its target for the whole run once warm-up ends.

The V4.2 run's cosine schedule had decayed to ~0 by step 130 of 600: most of its training ran at a
learning rate too small to learn anything.
"""

import pytest
import torch
from transformers import get_scheduler

from configs.recipe import CONFIG_DIR, load_recipe
from tasks.training.train import grpo_config


def _lr_curve(recipe_name: str, tmp_path, scheduler_type: str | None = None) -> list[float]:
    training = load_recipe(CONFIG_DIR / recipe_name).training
    args = grpo_config(training, seed=0, output_dir=tmp_path)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    scheduler = get_scheduler(
        scheduler_type or args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=args.get_warmup_steps(training.max_steps),
        num_training_steps=training.max_steps,
    )
    curve = []
    for _ in range(training.max_steps):
        curve.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return curve


@pytest.mark.parametrize("recipe", ["l4_v42.yaml", "cpu_tiny.yaml"])
def test_default_schedule_holds_the_target_after_warmup(recipe: str, tmp_path) -> None:
    target = load_recipe(CONFIG_DIR / recipe).training.learning_rate
    curve = _lr_curve(recipe, tmp_path)
    warmup = next(step for step, lr in enumerate(curve) if lr == pytest.approx(target))
    assert warmup <= 0.05 * len(curve) + 1
    assert all(lr == pytest.approx(target) for lr in curve[warmup:])


def test_the_check_would_catch_the_seeds_cosine(tmp_path) -> None:
    curve = _lr_curve("l4_v42.yaml", tmp_path, scheduler_type="cosine")
    assert curve[-1] < 0.01 * max(curve)
