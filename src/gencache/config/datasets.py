"""Which datasets a config may name, and the ``data_kwargs`` model each one validates with: the built-ins' and
the plug-ins'. Other packages add datasets through the ``gencache.recipes`` entry point group: the entry point's name
is the ``dataset_name``, its object a recipe (an instance, a class, or a callable returning one) whose
``kwargs_model`` is a :class:`KwargsModel`. Listing names imports no plug-in; looking one up imports it.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from gencache.config.kwargs import KwargsModel
from gencache.config.messages import unknown_name
from gencache.core.errors import ConfigError, DatasetError, first_line

GROUP = "gencache.recipes"


CACHE_DATASET = Field(
    default=True, description="Accepted for configs written for the SemPIC research code; has no effect."
)


class BiographyKwargs(KwargsModel):
    question_type: Literal["completion", "QA"] = Field(
        default="completion",
        description="completion: '## ' + a sentence prefix; QA: a templated question plus an answer-only cue.",
    )
    cache_dataset: StrictBool = CACHE_DATASET


class HotpotQAKwargs(KwargsModel):
    add_inst: StrictBool = Field(default=True, description="Prepend the instruction and append the answer format.")
    add_cot: StrictBool = Field(default=True, description="Append the step-by-step sentence to the question.")
    difficulty: list[Literal["easy", "medium", "hard"]] = Field(
        default=["hard"],
        min_length=1,
        description="Levels to keep (a non-empty list of easy, medium, hard).",
    )


class MuSiQueKwargs(KwargsModel):
    add_inst: StrictBool = Field(default=True, description="Wrap the question in the instruction.")
    add_cot: StrictBool = Field(default=True, description="Append the step-by-step sentence and answer format.")
    cache_dataset: StrictBool = CACHE_DATASET


RulerTask = Literal[
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "qa_1",
    "qa_2",
]


class NIAHKwargs(KwargsModel):
    chunk_size: StrictInt = Field(default=4096, ge=1, description="Largest prompt chunk, in characters.")
    max_len: StrictInt = Field(
        default=-1, ge=-1, description="Skip contexts longer than this many teacher tokens; -1: no limit."
    )
    tasks: list[RulerTask] | None = Field(
        default=None, min_length=1, description="RULER tasks to keep (the 'task' column); null: all tasks."
    )
    cache_dataset: StrictBool = CACHE_DATASET


Scalar = StrictStr | StrictInt | StrictFloat | StrictBool | None


# The fields ``table`` and ``chat`` share.
DOCUMENT_FIELD = Field(default="text", min_length=1, description="The text field of documents given as objects.")
FILTERS: dict[str, Any] = Field(
    default={}, description="Keep only rows whose top-level column equals the value (or is one of a list of values)."
)
ID_DESCRIPTION = (
    "Column holding each row's own id (a string or an integer), which exports and the datasets view carry as "
    "row_id to join answers back to the rows; not part of the key. null: row_id is the row's index in the source."
)


class TableKwargs(KwargsModel):
    query: StrictStr = Field(default="question", min_length=1, description="Column holding the query (a string).")
    documents: StrictStr | list[StrictStr] | None = Field(
        default=None,
        description="Column(s) holding the documents, in order: each value is a string, a list of strings or a "
        "list of objects with a document_field; null: no documents.",
    )
    document_field: StrictStr = DOCUMENT_FIELD
    answer: StrictStr | None = Field(
        default="answer",
        description="Column holding the gold answer (a string); null: none (then num_shots must be 0).",
    )
    task: list[StrictStr] = Field(
        default=[],
        description="Columns copied into the key's task fields, {column: value}: what the answer depends on "
        "besides the documents and the query.",
    )
    instruction: StrictStr = Field(
        default="", description="Text before the query in the prompt, followed by a newline; not part of the key."
    )
    filters: dict[StrictStr, Scalar | list[Scalar]] = FILTERS
    shuffle: StrictBool = Field(default=True, description="Shuffle the rows with the seed; false: file order.")
    id: StrictStr | None = Field(default=None, min_length=1, description=ID_DESCRIPTION)

    @field_validator("documents")
    @classmethod
    def _documents(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one column (or be null for no documents)")
        return value


HISTORY = "history"


class ChatKwargs(KwargsModel):
    messages: StrictStr = Field(
        default="messages", min_length=1, description="Column holding the conversation (a list of {role, content})."
    )
    documents: StrictStr | list[StrictStr] | None = Field(
        default=None,
        description="Column(s) holding documents shown in the final user turn before its content; null: none.",
    )
    document_field: StrictStr = DOCUMENT_FIELD
    task: list[StrictStr] = Field(default=[], description="Columns copied into the key's task fields besides history.")
    filters: dict[StrictStr, Scalar | list[Scalar]] = FILTERS
    shuffle: StrictBool = Field(default=True, description="Shuffle the rows with the seed; false: file order.")
    id: StrictStr | None = Field(default=None, min_length=1, description=ID_DESCRIPTION)

    @field_validator("task")
    @classmethod
    def _task(cls, value: list[str]) -> list[str]:
        if HISTORY in value:
            raise ValueError(f"{HISTORY!r} is the key's conversation field; rename that column")
        return value


#: The one list of built-in dataset names, with each one's model (:data:`gencache.data.recipes.BUILTIN_DATASETS`
#: follows it).
DATASET_KWARGS: dict[str, type[KwargsModel]] = {
    "biography": BiographyKwargs,
    "hotpot_qa": HotpotQAKwargs,
    "musique": MuSiQueKwargs,
    "niah": NIAHKwargs,
    "table": TableKwargs,
    "chat": ChatKwargs,
}


def entry_point(name: str) -> metadata.EntryPoint | None:
    return next(iter(metadata.entry_points(group=GROUP, name=name)), None)


def describe(ep: metadata.EntryPoint) -> str:
    owner = f" of {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
    return f"recipe plug-in {ep.name!r} (entry point {ep.name} = {ep.value}{owner})"


def not_a_recipe(label: str, target: Any) -> DatasetError:
    return DatasetError(
        f"{label} is a {type(target).__name__}, not a gencache DatasetRecipe (an instance, a subclass or a "
        "callable returning one); point the entry point at the recipe."
    )


def plugin_recipe(name: str) -> tuple[Any, str]:
    """The recipe of the plug-in dataset ``name``, imported now and made an instance (calling a class or factory),
    and the plug-in's label for messages. A :class:`ConfigError` naming the known datasets when no plug-in has that
    name; one :class:`DatasetError` naming the plug-in when loading it fails, when it has no ``kwargs_model`` or when
    its name is not the entry point's."""
    ep = entry_point(name)
    if ep is None:
        raise ConfigError(unknown_name("dataset", name, dataset_names()))
    label = describe(ep)
    try:
        target = ep.load()
    except Exception as exc:  # whatever the plug-in's import raises: one line naming it
        raise DatasetError(
            f"{label} failed to import: {type(exc).__name__}: {first_line(exc)}; fix or uninstall the plug-in."
        ) from None
    if isinstance(target, type) or (callable(target) and not hasattr(target, "kwargs_model")):
        try:
            target = target()
        except Exception as exc:
            raise DatasetError(
                f"{label} failed to build its recipe: {type(exc).__name__}: {first_line(exc)}."
            ) from None
    model = getattr(target, "kwargs_model", None)
    if model is None:
        raise not_a_recipe(label, target)
    if not (isinstance(model, type) and issubclass(model, KwargsModel)):
        raise DatasetError(
            f"{label}: its kwargs_model is {model!r}, not a subclass of gencache.config.KwargsModel; derive the "
            "recipe's data_kwargs model from it."
        )
    if getattr(target, "name", None) != ep.name:
        raise DatasetError(
            f"{label}: its recipe is named {getattr(target, 'name', None)!r}; the recipe's name and the entry "
            "point's name must be the same."
        )
    return target, label


def dataset_names() -> list[str]:
    """The built-ins, then the installed plug-ins (sorted; nothing imported, one installed meanwhile is found)."""
    plugins = sorted(metadata.entry_points(group=GROUP).names)
    return [*DATASET_KWARGS, *(name for name in plugins if name not in DATASET_KWARGS)]


def dataset_kwargs_model(name: str) -> type[KwargsModel]:
    """The ``data_kwargs`` model of dataset ``name``: a built-in's, or a plug-in's (imported now; a plug-in cannot
    reuse a built-in's name)."""
    if name not in DATASET_KWARGS:
        model: type[KwargsModel] = plugin_recipe(name)[0].kwargs_model
        return model
    ep = entry_point(name)
    if ep is not None:
        raise DatasetError(
            f"{describe(ep)} uses the name of the built-in dataset {name!r}; a plug-in cannot replace a built-in, "
            "rename its entry point."
        )
    return DATASET_KWARGS[name]
