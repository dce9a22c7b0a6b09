"""Does a model read which problem a complaint is about, or only that it is a complaint?

For each one- and two-star review of a prepared eval split, the model is shown its extraction
prompt and the reference answer up to each issue flag, and gives the probability of `true` over
`false` for that flag (one forward pass a review). Per flag: the mean probability on the reviews
whose reference flags the problem and on those whose reference does not, and the AUC between them
(0.5: the same probability whatever the review says; 1: every review that states the problem
above every one that does not). At temperature 0.1 a flag whose AUC is near 0.5 is one switch
for all complaints, which is what the field agreement of a report shows after the fact.

Usage: .venv/bin/python benchmarks/flag_reading.py --eval STORE/prepared/KEY/eval.jsonl
       MODEL_DIR [MODEL_DIR ...]
(a model folder: the store's `sft/KEY/model`, a `tucano export` folder)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.review_evidence import ISSUES

LOW_STARS = 2


def auc(positives: list[float], negatives: list[float]) -> float:
    """The chance that a review with the problem gets a higher probability than one without."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def flag_probabilities(model_dir: Path, rows: list[dict]) -> dict[str, list[tuple[float, bool]]]:
    """Per issue: (P(true) / (P(true) + P(false)), whether the reference flags it) per row."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    encoded_words = [
        tokenizer.encode(word, add_special_tokens=False) for word in (" true", " false")
    ]
    if any(len(ids) != 1 for ids in encoded_words):
        # The odds compare the two words' first tokens: a word of several tokens is not one choice.
        raise SystemExit(f"{model_dir}: its tokenizer writes ' true' or ' false' in several tokens")
    (true_id,), (false_id,) = encoded_words
    found: dict[str, list[tuple[float, bool]]] = {issue: [] for issue in ISSUES}
    for row in rows:
        prompt = tokenizer.apply_chat_template(
            row["prompt"], tokenize=False, add_generation_prompt=True
        )
        reference = row["reference"]
        encoded = tokenizer(
            prompt + reference,
            return_offsets_mapping=True,
            add_special_tokens=False,
            return_tensors="pt",
        )
        offsets = encoded["offset_mapping"][0].tolist()
        with torch.no_grad():
            logits = model(encoded["input_ids"]).logits[0].float()
        flags = json.loads(reference)
        for issue in ISSUES:
            value_at = len(prompt) + reference.index(f'"{issue}":') + len(f'"{issue}":')
            token = next(i for i, (start, end) in enumerate(offsets) if end > value_at)
            odds = torch.softmax(logits[token - 1][[true_id, false_id]], dim=-1)
            found[issue].append((odds[0].item(), flags[issue] is True))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", type=Path, required=True, help="a prepared eval.jsonl")
    parser.add_argument("models", type=Path, nargs="+", help="model folders")
    args = parser.parse_args()
    rows = [
        row
        for row in map(json.loads, args.eval.read_text(encoding="utf-8").splitlines())
        if row["task"] == "extraction" and row["review_score"] <= LOW_STARS
    ]
    print(f"{len(rows)} one- and two-star eval reviews of {args.eval}\n")
    print("| model | flag | flagged by the reference | mean P, flagged | mean P, not | AUC |")
    print("|---|---|---:|---:|---:|---:|")
    for model_dir in args.models:
        for issue, pairs in flag_probabilities(model_dir, rows).items():
            flagged = [p for p, said in pairs if said]
            others = [p for p, said in pairs if not said]
            print(
                f"| {model_dir} | {issue} | {len(flagged)} of {len(pairs)} | "
                f"{sum(flagged) / max(1, len(flagged)):.2f} | "
                f"{sum(others) / max(1, len(others)):.2f} | {auc(flagged, others):.2f} |"
            )


if __name__ == "__main__":
    main()
