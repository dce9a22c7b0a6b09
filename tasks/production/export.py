"""`tucano export`: a model a retailer can serve without this project or PEFT.

The adapter is folded into the base weights in full precision (an NF4-trained adapter is merged
into the unquantized base, as QLoRA's authors do) and saved with the tokenizer and a card that
says what it is: recipe, data fingerprint, evaluation scores and the verdict of the comparison.
The folder is written complete or not at all (the store's marker comes last).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tasks.core.manifests import Adapter, BaseModelArtifact
from tasks.core.store import ArtifactStore
from tasks.evaluation.evaluate import load_with_adapter

CARD_FILE = "tucano_card.json"


def merged_model(
    base: BaseModelArtifact, adapter: Adapter | None, store: ArtifactStore
) -> tuple[Any, Any]:
    """Base + adapter as one plain transformers model, in full precision."""
    full_precision = base.model_copy(update={"load_in_4bit": False})
    model, tokenizer = load_with_adapter(full_precision, adapter, store)
    return (model if adapter is None else model.merge_and_unload()), tokenizer


def card_markdown(card: dict[str, Any]) -> str:
    lines = [
        f"# tucano-commerce model: {card['model']}",
        "",
        "A merged model (LoRA folded into the base weights); load it with "
        "`AutoModelForCausalLM.from_pretrained`, no PEFT needed.",
        "",
        f"- Recipe: `{card['recipe']}`",
        f"- Base model: `{card['base']}`",
        f"- Data fingerprint: `{card['data_fingerprint']}`",
        f"- Verdict: {card.get('verdict') or 'not compared'}",
    ]
    scores = card.get("eval_scores") or {}
    if scores:
        lines += ["", "| Task | Mean reward on the eval split |", "|---|---:|"]
        lines += [f"| {task} | {value:.3f} |" for task, value in scores.items()]
    return "\n".join(lines) + "\n"


def export_model(
    base: BaseModelArtifact,
    adapter: Adapter | None,
    card: dict[str, Any],
    to: str,
    store: ArtifactStore,
) -> str:
    """Writes the merged model, tokenizer and card to the folder or URI `to`; returns its URI."""
    model, tokenizer = merged_model(base, adapter, store)
    head, _, name = to.rstrip("/").rpartition("/")
    if not name:
        raise ValueError(f"--to {to!r}: name a folder to write the model into")
    target = ArtifactStore(head or ".")
    with tempfile.TemporaryDirectory(prefix="tucano-export-") as tmp:
        folder = Path(tmp) / "model"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / CARD_FILE).write_text(json.dumps(card, indent=2, sort_keys=True))
        (folder / "README.md").write_text(card_markdown(card))
        return target.put_dir(folder, name)
