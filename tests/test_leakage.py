"""An eval prompt that was trained on is refused: by id, by its messages, or by its order."""

import pytest

from tasks.evaluation.leakage import LeakageError, assert_no_overlap, leaked_prompts


def _row(prompt_id: str, content: str, order_id: str | None = None) -> dict:
    return {
        "prompt_id": prompt_id,
        "prompt": [{"role": "user", "content": content}],
        "order_id": order_id,
    }


TRAIN = [_row("a", "x"), _row("extraction-r1", "review", order_id="o1")]


@pytest.mark.parametrize(
    ("eval_row", "leaked"),
    [
        (_row("b", "y"), []),
        (_row("b", "y", order_id="o2"), []),
        (_row("a", "other"), ["a"]),  # the same id
        (_row("c", "x"), ["c"]),  # the same messages under another id
        (_row("push-o1", "notify", order_id="o1"), ["push-o1"]),  # another task, same order
    ],
)
def test_what_counts_as_trained_on(eval_row: dict, leaked: list[str]) -> None:
    assert leaked_prompts(TRAIN, [eval_row]) == leaked


def test_an_eval_split_overlapping_train_is_refused() -> None:
    assert_no_overlap(TRAIN, [_row("b", "y")])
    with pytest.raises(LeakageError, match=r"also train prompts \(e.g. \['c'\]\)"):
        assert_no_overlap(TRAIN, [_row("c", "x")])


def test_a_champion_without_a_training_record_cannot_be_cleared(tmp_path) -> None:
    """Champions promoted before they recorded their training data: nothing proves the new eval
    split is clean of their prompts, so the retraining must refuse, and say what to do."""
    from tasks.core.manifests import Adapter, BaseModelArtifact
    from tasks.core.store import ArtifactStore
    from tasks.evaluation.champion import Champion, eval_prompts_trained_on, refusal_reason

    base = BaseModelArtifact(fingerprint="b", source="tiny", location="m", in_store=True)
    adapter = Adapter(
        fingerprint="a", seed=1, run_key="k", folder="runs/k/best", log_history="h", global_step=2
    )
    legacy = Champion(base=base, adapter=adapter, promoted_at="t", data_fingerprint="d", recipe="r")
    base_model = legacy.model_copy(update={"adapter": None})
    found = eval_prompts_trained_on([base_model, legacy], [_row("b", "y")], ArtifactStore(tmp_path))
    assert found == {legacy.label: None}
    assert "has no record of what it trained on" in refusal_reason(found)
