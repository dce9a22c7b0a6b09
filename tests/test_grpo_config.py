"""Every GRPO knob the recipe exposes reaches TRL's config unchanged."""

from configs.recipe import CONFIG_DIR, load_recipe
from tasks.training.train import grpo_config


def test_v42_recipe_reaches_grpo_config(tmp_path) -> None:
    training = load_recipe(CONFIG_DIR / "l4_v42.yaml").training
    args = grpo_config(training, seed=123, output_dir=tmp_path)
    assert (args.loss_type, args.scale_rewards, args.beta) == ("dr_grpo", "none", 0.0)
    assert (args.epsilon, args.epsilon_high) == (0.2, 0.28)
    assert args.multi_objective_aggregation == "normalize_then_sum"
    assert args.mask_truncated_completions is False
    assert (args.temperature, args.top_p, args.top_k) == (1.0, 1.0, 0)
    assert (args.num_generations, args.max_completion_length) == (16, 512)
    assert args.per_device_train_batch_size == 2 * 16  # 2 prompts x 16 generations per step
    assert args.gradient_accumulation_steps == 1
    assert (args.max_steps, args.save_steps, args.eval_steps) == (1500, 100, 50)
    assert (args.learning_rate, args.lr_scheduler_type) == (5e-6, "constant_with_warmup")
    assert (args.seed, args.data_seed) == (123, 123)


def test_changing_a_knob_changes_the_config(tmp_path) -> None:
    training = load_recipe(CONFIG_DIR / "cpu_tiny.yaml").training.model_copy(
        update={"loss_type": "dapo", "mask_truncated_completions": True, "epsilon_high": 0.3}
    )
    args = grpo_config(training, seed=0, output_dir=tmp_path)
    assert (args.loss_type, args.mask_truncated_completions, args.epsilon_high) == (
        "dapo",
        True,
        0.3,
    )


def test_the_entropy_bonus_reaches_trl(tmp_path) -> None:
    """Skywork-OR1's adaptive entropy control, the seed investigation's first fix for collapse."""
    training = load_recipe(CONFIG_DIR / "cpu_tiny.yaml").training.model_copy(
        update={"entropy_coef": 5e-3, "use_adaptive_entropy": True, "entropy_target": 0.5}
    )
    args = grpo_config(training, seed=0, output_dir=tmp_path)
    assert (args.entropy_coef, args.use_adaptive_entropy, args.entropy_target) == (5e-3, True, 0.5)
    default = grpo_config(load_recipe(CONFIG_DIR / "l4_v42.yaml").training, 0, tmp_path)
    assert (default.entropy_coef, default.use_adaptive_entropy) == (0.0, False)


def test_gradient_checkpointing_reaches_both_trainers(tmp_path) -> None:
    """TRL recomputes activations by default; a recipe on a CPU with memory to spare keeps them."""
    from tasks.training.sft import sft_args

    recipe = load_recipe(CONFIG_DIR / "cpu_tiny.yaml")
    assert grpo_config(recipe.training, seed=0, output_dir=tmp_path).gradient_checkpointing
    assert sft_args(recipe.sft, tmp_path).gradient_checkpointing
    kept = {"gradient_checkpointing": False}
    training, sft = recipe.training.model_copy(update=kept), recipe.sft.model_copy(update=kept)
    assert not grpo_config(training, seed=0, output_dir=tmp_path).gradient_checkpointing
    assert not sft_args(sft, tmp_path).gradient_checkpointing
