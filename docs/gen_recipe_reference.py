"""The recipe reference page, from the pydantic models in configs/recipe.py.

The page is made from the code itself, so it cannot drift from it: one table per model, in the
order the models appear in the file, with every field's type, default, bounds and description.
`docs/generate.py` writes it to docs/recipe-reference.md (tests/test_docs.py fails until it has).
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

PAGE = "recipe-reference.md"

# annotated_types constraint classes -> how the page writes them.
BOUNDS = {"Gt": ">", "Ge": "≥", "Lt": "<", "Le": "≤"}


def recipe_models(module: types.ModuleType) -> list[type[BaseModel]]:
    """Every public pydantic model defined in `module`, in the order of the source file."""
    models = [
        value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseModel)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    ]
    return sorted(models, key=lambda model: inspect.getsourcelines(model)[1])


def anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (`X` or `X | None`), if it holds one."""
    candidates = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    for candidate in (annotation, *candidates):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def recipe_paths(root: type[BaseModel], prefix: str = "") -> dict[type[BaseModel], str]:
    """Where each model sits in a recipe file: `training.task_weighting` for TaskWeightingConfig."""
    paths = {root: prefix or "(top level)"}
    for name, field in root.model_fields.items():
        nested = _nested_model(field.annotation)
        if nested is not None:
            paths.update(recipe_paths(nested, f"{prefix}.{name}" if prefix else name))
    return paths


def type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{anchor(annotation)})"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: FieldInfo) -> str:
    """The default as a recipe would write it (JSON is YAML), or `required`."""
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return f"the defaults of [{type(value).__name__}](#{anchor(type(value))})"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def constraints_text(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        kind = type(item).__name__
        if kind in BOUNDS:
            parts.append(f"{BOUNDS[kind]} {getattr(item, kind.lower())}")
        elif kind == "MinLen":
            parts.append(f"at least {item.min_length} item(s)")
        elif kind == "MaxLen":
            parts.append(f"at most {item.max_length} item(s)")
        elif getattr(item, "pattern", None):
            parts.append(f"matches `{item.pattern}`")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def model_section(model: type[BaseModel], path: str | None) -> str:
    lines = [f"## {model.__name__} {{#{anchor(model)}}}", ""]
    if path:
        lines += [f"In a recipe: `{path}`." if path != "(top level)" else "The recipe file.", ""]
    doc = model.__dict__.get("__doc__")
    if doc:
        lines += [inspect.cleandoc(doc).replace("\n", " "), ""]
    lines += [
        "| field | type | default | bounds | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, field in model.model_fields.items():
        cells = [
            f"`{name}`",
            type_name(field.annotation),
            default_text(field),
            constraints_text(field),
            field.description or "",
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def reference_page() -> str:
    from configs import recipe

    paths = recipe_paths(recipe.Recipe)
    header = [
        "# Recipe reference",
        "",
        "Every field of every model in `configs/recipe.py`, in the order of the file, generated",
        "from the pydantic models by `docs/generate.py`. A recipe is a YAML file of these",
        "fields (`configs/*.yaml`); every model forbids unknown keys, so a",
        "misspelt field is an error that names it. Defaults are written as a recipe would write",
        "them; a model-valued default is that model's own defaults.",
        "",
    ]
    sections = [model_section(model, paths.get(model)) for model in recipe_models(recipe)]
    return "\n".join(header) + "\n" + "\n".join(sections)
