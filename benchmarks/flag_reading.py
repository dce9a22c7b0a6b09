"""Does a model read which problem a complaint is about, or only that it is a complaint?

For each one- and two-star review of a prepared eval split, the model is shown its extraction
prompt and the reference answer up to each issue flag, and gives the probability of `true` over
`false` for that flag (one forward pass a review). Per flag: the mean probability on the reviews
whose reference flags the problem and on those whose reference does not, and the AUC between them
(0.5: the same probability whatever the review says; 1: every review that states the problem
above every one that does not). At temperature 0.1 a flag whose AUC is near 0.5 is one switch
for all complaints, which is what the field agreement of a report shows after the fact.

With `--train` (the same store's train.jsonl), two readouts fitted on the train split's one- and
two-star extraction reviews say where the reading is lost: a logistic readout of the model's own
hidden states at each flag (is the reading in the model, unused by its answer?), and one of the
review's words alone (how hard the references are to learn from that many reviews at all).

With `--people`, the reviews people read blind (`data/audit/`) instead of the references (can
the model read what a person reads, given that reading to learn from?): a readout of the model's
hidden states at its answer's first judgement, fitted on the dev and val sets' readings and
scored on June 2018's, and of the product and seller complaints, how many it would flag as such
and not as a delivery problem, as the unseen-month check asks. Its threshold is chosen on June
(at most 10% of June's reviews without the problem flagged), which no run could do. With
`--people --references TRAIN` the readout is what a stage of the pipeline could fit: on a train
split's one- and two-star reviews and their references' flags, its threshold chosen on them by
cross-validation, June only scored.

Usage: .venv/bin/python benchmarks/flag_reading.py --eval STORE/prepared/KEY/eval.jsonl
       [--train STORE/prepared/KEY/train.jsonl [--readout-reviews 400]] MODEL_DIR [MODEL_DIR ...]
       .venv/bin/python benchmarks/flag_reading.py --people [--instructions named]
       [--references STORE/prepared/KEY/train.jsonl --readout-reviews 500] MODEL_DIR ...
(a model folder: the store's `sft/KEY/model`, a `tucano export` folder)
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.unseen_month import READINGS  # noqa: E402
from rewards.review_evidence import ISSUES  # noqa: E402

LOW_STARS = 2
# The hidden states read at a flag: a third of the way up, two thirds, and the last layer's, so a
# reading the top layers blur is still seen.
READOUT_DEPTHS = (1 / 3, 2 / 3, 1.0)
# Ridge strength of the logistic readouts, on standardized features: the fitted AUCs moved by
# 0.01 between 0.1 and 1.0 on the recorded run's SFT model.
READOUT_RIDGE = 1.0
# Words and word pairs in fewer train reviews than this say nothing a readout can generalize.
MIN_FEATURE_REVIEWS = 2
AUDIT = ROOT / "data" / "audit"
# The dev and val sets people read, to fit on; June 2018's, to score (those of its reviews the
# earlier sets hold too are left out of the fit).
PEOPLE_FITTED = (AUDIT / "low_star_readings.jsonl", AUDIT / "low_star_readings_2.jsonl")
PEOPLE_SCORED = READINGS["2018-06"]
# Where --people reads every flag's hidden states: the answer's first judgement, with only the
# stars' score and sentiment before it, so no flag of the reference's reading is in the context.
FIRST_JUDGEMENT = "delivery_issue"
# --people flags a review where its readout scores above all but this share of the reviews a
# person read no such problem in, the threshold chosen on the scored month itself (no run could:
# the best this fit can do at that false-alarm rate on June). About the reward's own reading's false
# alarms on June (3 of 22, 2 of 54, 5 of 50).
PEOPLE_FALSE_ALARMS = 0.1
# --references chooses that threshold on the fit's own reviews, each scored by a readout fitted
# on the other folds: five leave a fifth out, enough to fit on and every review scored once.
THRESHOLD_FOLDS = 5


def auc(positives: list[float], negatives: list[float]) -> float:
    """The chance that a review with the problem gets a higher probability than one without."""
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def split_auc(scores: list[float], said: list[bool]) -> float:
    return auc(
        [s for s, flagged in zip(scores, said, strict=True) if flagged],
        [s for s, flagged in zip(scores, said, strict=True) if not flagged],
    )


def low_star_extraction(path: Path, limit: int | None = None) -> list[dict]:
    rows = [
        row
        for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if row["task"] == "extraction" and row["review_score"] <= LOW_STARS
    ]
    return rows[:limit]


def read_review_id(reading: dict) -> str:
    """The review a reading is of: the first sets name it by its extraction prompt."""
    return reading.get("review_id") or reading["prompt_id"].removeprefix("extraction-")


def people_rows(path: Path, prompts: dict[str, dict]) -> list[dict]:
    """The reviews of a readings file with their extraction prompts (`prompts`, by review id)
    and, under `people`, the flags the person read."""
    rows = []
    for reading in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
        review_id = read_review_id(reading)
        if review_id not in prompts:
            raise SystemExit(f"{path}: review {review_id} has no commented review in the data")
        people = {issue: reading[issue] is True for issue in ISSUES}
        rows.append({**prompts[review_id], "people": people})
    return rows


def people_sets(instructions: str) -> tuple[list[dict], list[dict], int]:
    """The reviews to fit the readouts on, those to score them on (June 2018's), and how many
    of the scored reviews the fitted sets held too (scored only)."""
    from tasks.production.analyze import review_prompts

    data = review_prompts(str(ROOT / "data" / "olist"), instructions)
    prompts = {row["review_id"]: row for row in data}
    scored = people_rows(PEOPLE_SCORED, prompts)
    june_ids = {row["review_id"] for row in scored}
    earlier = [row for path in PEOPLE_FITTED for row in people_rows(path, prompts)]
    fitted = [row for row in earlier if row["review_id"] not in june_ids]
    return fitted, scored, len(earlier) - len(fitted)


def threshold_at(scores: list[float], said: list[bool], false_alarms: float) -> float:
    """The score above which lie all but `false_alarms` of those where `said` is false."""
    others = sorted((score for score, s in zip(scores, said, strict=True) if not s), reverse=True)
    allowed = int(false_alarms * len(others))
    return others[allowed] if allowed < len(others) else float("-inf")


def flagged_at(scores: list[float], said: list[bool], false_alarms: float) -> list[bool]:
    """Flag the scores above all but `false_alarms` of those where `said` is false."""
    threshold = threshold_at(scores, said, false_alarms)
    return [score > threshold for score in scores]


def cross_validated_threshold(train_x, train_said: list[bool], false_alarms: float) -> float:
    """`threshold_at` on the fit's own reviews, each scored by a readout fitted on the other
    folds (a seeded deal), so no scored review chooses it."""
    order = list(range(len(train_said)))
    random.Random(0).shuffle(order)
    scores = [0.0] * len(order)
    for fold in range(THRESHOLD_FOLDS):
        held = order[fold::THRESHOLD_FOLDS]
        kept = sorted(set(order) - set(held))
        fitted = readout_scores(train_x[kept], [train_said[i] for i in kept], train_x[held])
        for index, score in zip(held, fitted, strict=True):
            scores[index] = score
    return threshold_at(scores, train_said, false_alarms)


def people_table(
    model_dirs: list[Path],
    instructions: str,
    references: Path | None = None,
    reviews: int | None = None,
) -> None:
    """The readout fitted on people's readings, its threshold chosen on June; with `references`
    (a train.jsonl), fitted on its first `reviews` one- and two-star reviews and their
    references' flags, its threshold chosen on them."""
    import torch

    fitted, scored, shared = people_sets(instructions)
    if references is None:
        fitted_said = {issue: [row["people"][issue] for row in fitted] for issue in ISSUES}
        print(
            f"readouts fitted on {len(fitted)} reviews people read, scored on June 2018's "
            f"{len(scored)} ({shared} of them in the fitted sets too, left out of the fit); "
            f"states read at {FIRST_JUDGEMENT}; flagged above all but {PEOPLE_FALSE_ALARMS:.0%} "
            "of the reviews read without the problem"
        )
    else:
        june = {row["review_id"] for row in scored}
        fitted = [
            row for row in low_star_extraction(references, reviews) if row["review_id"] not in june
        ]
        if fitted and fitted[0]["prompt"][0] != scored[0]["prompt"][0]:
            raise SystemExit(
                f"{references}: its extraction system message is not the one --instructions "
                f"{instructions} builds for June's reviews; name the split's "
                "data.extraction_instructions"
            )
        answers = [json.loads(row["reference"]) for row in fitted]
        fitted_said = {issue: [answer[issue] is True for answer in answers] for issue in ISSUES}
        print(
            f"readouts fitted on the references of {len(fitted)} one- and two-star reviews of "
            f"{references}, scored on June 2018's {len(scored)} as people read them; states read "
            f"at {FIRST_JUDGEMENT}; flagged above all but {PEOPLE_FALSE_ALARMS:.0%} of the fit's "
            f"reviews without the reference's problem, each scored by {THRESHOLD_FOLDS}-fold "
            "cross-validation"
        )
    print("\n| model | flag | a person read it | AUC, readout | flagged | false alarms |")
    print("|---|---|---:|---:|---:|---:|")
    for model_dir in model_dirs:
        found = read_flags(model_dir, scored, hidden=True, states_at=FIRST_JUDGEMENT)
        learnt = read_flags(model_dir, fitted, hidden=True, states_at=FIRST_JUDGEMENT)
        flagged = {}
        for issue in ISSUES:
            said = [row["people"][issue] for row in scored]
            fit_x = torch.stack([states for _, _, states in learnt[issue]])
            scores = readout_scores(
                fit_x, fitted_said[issue], torch.stack([states for _, _, states in found[issue]])
            )
            if references is None:
                flagged[issue] = flagged_at(scores, said, PEOPLE_FALSE_ALARMS)
            else:
                threshold = cross_validated_threshold(
                    fit_x, fitted_said[issue], PEOPLE_FALSE_ALARMS
                )
                flagged[issue] = [score > threshold for score in scores]
            hits = sum(f and s for f, s in zip(flagged[issue], said, strict=True))
            false = sum(f and not s for f, s in zip(flagged[issue], said, strict=True))
            print(
                f"| {model_dir} | {issue} | {sum(said)} of {len(said)} | "
                f"{split_auc(scores, said):.2f} | {hits} of {sum(said)} | "
                f"{false} of {len(said) - sum(said)} |"
            )
        for issue in ISSUES:
            if issue == "delivery_issue":
                continue
            complaints = [k for k, row in enumerate(scored) if row["people"][issue]]
            alone = sum(flagged[issue][k] and not flagged["delivery_issue"][k] for k in complaints)
            print(
                f"| {model_dir} | {issue}, not as delivery | | | {alone} of {len(complaints)} | |"
            )


def read_flags(
    model_dir: Path, rows: list[dict], hidden: bool = False, states_at: str | None = None
) -> dict[str, list[tuple]]:
    """Per issue, per row: (P(true) / (P(true) + P(false)), whether the reference flags it, and
    with `hidden` the hidden states at READOUT_DEPTHS where the model writes the flag, or, with
    `states_at`, where it writes that field for every flag)."""
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
    layers = model.config.num_hidden_layers
    depths = sorted({round(depth * layers) for depth in READOUT_DEPTHS})
    found: dict[str, list[tuple]] = {issue: [] for issue in ISSUES}
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
            output = model(encoded["input_ids"], output_hidden_states=hidden)
        logits = output.logits[0].float()
        flags = json.loads(reference)
        value_tokens = {}
        for field in set(ISSUES) | ({states_at} if states_at else set()):
            value_at = len(prompt) + reference.index(f'"{field}":') + len(f'"{field}":')
            value_tokens[field] = next(i for i, (_, end) in enumerate(offsets) if end > value_at)
        for issue in ISSUES:
            token = value_tokens[issue]
            odds = torch.softmax(logits[token - 1][[true_id, false_id]], dim=-1)
            read_at = value_tokens[states_at or issue]
            states = (
                torch.cat([output.hidden_states[d][0, read_at - 1].float() for d in depths])
                if hidden
                else None
            )
            found[issue].append((odds[0].item(), flags[issue] is True, states))
    return found


def readout_scores(train_x, train_said: list[bool], eval_x) -> list[float]:
    """A ridge-regularized logistic readout fitted on the train features, scored on the eval
    ones."""
    import torch

    mean, spread = train_x.mean(0), train_x.std(0) + 1e-6
    train_x, eval_x = (train_x - mean) / spread, (eval_x - mean) / spread
    target = torch.tensor(train_said, dtype=torch.float32)
    weights = torch.zeros(train_x.shape[1], requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=300)

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        value = (
            torch.nn.functional.binary_cross_entropy_with_logits(train_x @ weights + bias, target)
            + READOUT_RIDGE * weights.pow(2).mean()
        )
        value.backward()
        return value

    optimizer.step(loss)
    with torch.no_grad():
        return (eval_x @ weights + bias).tolist()


def review_words(text: str) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return set(words) | {f"{a} {b}" for a, b in itertools.pairwise(words)}


def word_features(train: list[dict], *row_sets: list[dict]) -> list:
    """For each set of rows, which of the train reviews' frequent words and word pairs each row's
    review holds (one vocabulary, counted once, for all the sets)."""
    import torch

    counts: dict[str, int] = {}
    for row in train:
        for feature in review_words(row["review_text"]):
            counts[feature] = counts.get(feature, 0) + 1
    frequent = [feature for feature, n in counts.items() if n >= MIN_FEATURE_REVIEWS]
    vocabulary = {feature: index for index, feature in enumerate(frequent)}
    matrices = []
    for rows in row_sets:
        features = torch.zeros(len(rows), len(vocabulary))
        for index, row in enumerate(rows):
            for feature in review_words(row["review_text"]) & vocabulary.keys():
                features[index, vocabulary[feature]] = 1.0
        matrices.append(features)
    return matrices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", type=Path, help="a prepared eval.jsonl")
    parser.add_argument(
        "--people",
        action="store_true",
        help="readouts fitted on the dev and val sets people read, scored on June 2018's",
    )
    parser.add_argument(
        "--instructions",
        default="named",
        choices=("named", "described"),
        help="the extraction system message the model was trained with (data."
        "extraction_instructions), for --people",
    )
    parser.add_argument("--train", type=Path, help="its train.jsonl: fit the two readouts on it")
    parser.add_argument(
        "--references",
        type=Path,
        help="with --people: a train.jsonl whose references' flags the readout is fitted on, its "
        "threshold chosen on them (June only scored)",
    )
    parser.add_argument(
        "--readout-reviews",
        type=int,
        default=400,
        help="one- and two-star train reviews the readouts are fitted on (a forward pass each)",
    )
    parser.add_argument("models", type=Path, nargs="+", help="model folders")
    args = parser.parse_args()
    if args.people:
        if args.eval or args.train:
            parser.error("--people reads the audit readings: it takes no --eval or --train")
        people_table(args.models, args.instructions, args.references, args.readout_reviews)
        return
    if args.references:
        parser.error("--references is a fit for --people")
    if args.eval is None:
        parser.error("--eval is required without --people")
    rows = low_star_extraction(args.eval)
    train = low_star_extraction(args.train, args.readout_reviews) if args.train else []
    print(f"{len(rows)} one- and two-star eval reviews of {args.eval}")
    if train:
        print(f"readouts fitted on {len(train)} one- and two-star reviews of {args.train}")
    print()
    readout_header = " AUC, readout of its hidden states |" if train else ""
    print(
        "| model | flag | flagged by the reference | mean P, flagged | mean P, not | AUC |"
        + readout_header
    )
    print("|---|---|---:|---:|---:|---:|" + ("---:|" if train else ""))
    import torch

    for model_dir in args.models:
        found = read_flags(model_dir, rows, hidden=bool(train))
        fitted = read_flags(model_dir, train, hidden=True) if train else {}
        for issue, read in found.items():
            probabilities = [p for p, _, _ in read]
            said = [flagged for _, flagged, _ in read]
            flagged = [p for p, s in zip(probabilities, said, strict=True) if s]
            others = [p for p, s in zip(probabilities, said, strict=True) if not s]
            line = (
                f"| {model_dir} | {issue} | {len(flagged)} of {len(read)} | "
                f"{sum(flagged) / max(1, len(flagged)):.2f} | "
                f"{sum(others) / max(1, len(others)):.2f} | {auc(flagged, others):.2f} |"
            )
            if train:
                scores = readout_scores(
                    torch.stack([states for _, _, states in fitted[issue]]),
                    [s for _, s, _ in fitted[issue]],
                    torch.stack([states for _, _, states in read]),
                )
                line += f" {split_auc(scores, said):.2f} |"
            print(line)
    if train:
        print("\n| the review's words alone (logistic) | flag | flagged in train | AUC |")
        print("|---|---|---:|---:|")
        train_words, eval_words = word_features(train, train, rows)
        for issue in ISSUES:
            train_said = [json.loads(row["reference"])[issue] is True for row in train]
            said = [json.loads(row["reference"])[issue] is True for row in rows]
            scores = readout_scores(train_words, train_said, eval_words)
            print(
                f"| words and word pairs in {MIN_FEATURE_REVIEWS}+ train reviews | {issue} | "
                f"{sum(train_said)} of {len(train)} | {split_auc(scores, said):.2f} |"
            )


if __name__ == "__main__":
    main()
