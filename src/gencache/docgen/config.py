"""The config's JSON Schema and reference page, generated from the models and registries.

``docs/config.schema.json``, ``docs/config.md`` and the dataset columns in ``docs/datasets.md``
(:mod:`gencache.docgen.datasets`) are the output of this module; a test compares the checked-in files with what it
generates, so they cannot drift from the code. Regenerate them with::

    uv run python -m gencache.docgen.config          # rewrite docs/ under the current directory
    uv run python -m gencache.docgen.config --check  # exit 1 if they are out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gencache.config import DEFAULTS_FILENAME, CacheConfig, DataConfig, ModelConfig, config_to_json, parse_config
from gencache.config.engines import ENGINE_OPTIONS
from gencache.config.generation import (
    GENERATION_FORBIDDEN,
    GENERATION_SETTINGS,
    GENERATION_UNSUPPORTED,
    LOGIT_FIELDS,
    NO_LOGITS_MESSAGE,
    NO_NEUTRAL,
)
from gencache.config.names import ALL_ENGINES
from gencache.docgen.datasets import table_cell
from gencache.docgen.schema import config_schema, factory_default

MARKDOWN_PATH = Path("docs") / "config.md"
SCHEMA_PATH = Path("docs") / "config.schema.json"

#: A complete config (with the defaults it relies on left out); the reference page shows it and its effective form.
EXAMPLE_CONFIG: dict[str, Any] = {
    "model": {
        "model_path": "Qwen/Qwen3-8B",
        "dtype": "bfloat16",
        "device": "cuda:0",
        "generation_kwargs": {"max_new_tokens": 512, "do_sample": False},
    },
    "data_configs": [
        {
            "dataset_name": "hotpot_qa",
            "num_samples": 512,
            "num_data_strs": 0,
            "num_shots": 0,
            "subset": "fullwiki",
            "split": "train",
            "seed": 0,
            "data_kwargs": {"add_inst": True, "add_cot": True},
            "template": "tokenizer_chat",
        },
        {
            "dataset_name": "biography",
            "num_samples": 64,
            "num_data_strs": 3,
            "num_shots": 0,
            "subset": "10k",
            "seed": 1,
            "data_kwargs": {"question_type": "QA"},
            "template": "tokenizer_chat",
            "template_kwargs": {"system_prompt": "Answer briefly."},
        },
    ],
    "gen_batch_size": 8,
    "output_dir": "generation_cache/artifacts/qwen_3_8b_teacher/hotpot_bio_greedy512",
}


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved = defs.get(ref[len("#/$defs/") :])
        if isinstance(resolved, Mapping):
            return resolved
    return prop


def _type_text(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in prop:
        target = _resolve(prop, defs)
        if target is not prop:
            if "enum" in target:
                return " \\| ".join(_code(v) for v in target["enum"])
            title = target.get("title")
            return f"object ({title})" if title else "object"
    if "const" in prop:
        return _code(prop["const"])
    if "enum" in prop:
        return " \\| ".join(_code(v) for v in prop["enum"])
    if "anyOf" in prop:
        return " \\| ".join(_type_text(option, defs) for option in prop["anyOf"])
    kind = prop.get("type")
    if isinstance(kind, list):
        return " \\| ".join(str(k) for k in kind)
    if kind == "array":
        items = prop.get("items")
        return f"list of {_type_text(items, defs)}" if isinstance(items, Mapping) else "list"
    if kind == "integer":
        return "int"
    if kind == "string":
        return "str"
    if kind == "boolean":
        return "bool"
    return str(kind) if kind else "any"


def _constraints(prop: Mapping[str, Any]) -> list[str]:
    rules: list[str] = []
    options = prop.get("anyOf", [prop])
    for option in options:
        if not isinstance(option, Mapping):
            continue
        if "minimum" in option:
            rules.append(f">= {option['minimum']}")
        if "exclusiveMinimum" in option:
            rules.append(f"> {option['exclusiveMinimum']}")
        if "maximum" in option:
            rules.append(f"<= {option['maximum']}")
        if option.get("minLength") == 1:
            rules.append("non-empty")
        if option.get("minItems") == 1:
            rules.append("non-empty")
    return rules


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return _code(factory_default(info))
    return _code(info.default)


def _neutral_text(value: Any) -> str:
    return "-" if value is NO_NEUTRAL else _code(value)


def _field_table(
    model: type[BaseModel], prefix: str, defs: Mapping[str, Any], schema: Mapping[str, Any] | None = None
) -> list[str]:
    model_schema = schema if schema is not None else model.model_json_schema(ref_template="#/$defs/{model}")
    all_defs = {**defs, **model_schema.get("$defs", {})}
    props: Mapping[str, Any] = model_schema.get("properties", {})
    rows = ["| field | type | default | rule |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        prop = props.get(name, {})
        constraints = list(dict.fromkeys(_constraints(prop)))
        rule = " ".join(
            [
                *([info.description] if info.description else []),
                *([f"Must be {', '.join(constraints)}."] if constraints else []),
            ]
        )
        rows.append(f"| `{prefix}{name}` | {_type_text(prop, all_defs)} | {_default_text(info)} | {table_cell(rule)} |")
    return rows


def _example_block(value: Any) -> list[str]:
    return ["```json", json.dumps(value, indent=2, ensure_ascii=False), "```"]


def render_config_markdown() -> str:
    """The config reference page (``docs/config.md``): every field with its type, default and rule, the
    per-dataset ``data_kwargs`` and per-template ``template_kwargs`` tables, and an example config."""
    schema = config_schema()
    defs: Mapping[str, Any] = schema["$defs"]
    lines = [
        *_intro_lines(),
        *_model_lines(schema, defs),
        *_generation_lines(),
        *_engine_lines(defs),
        *_data_config_lines(defs),
        *_template_lines(defs),
        *_example_lines(),
    ]
    return "\n".join(lines)


def _intro_lines() -> list[str]:
    return [
        "# Config reference",
        "",
        "<!-- Generated by `uv run python -m gencache.docgen.config` from the models in src/gencache/config/",
        "     and the dataset and template registries. Do not edit by hand; a test fails when this file is out of",
        "     date. -->",
        "",
        "A generation-cache config is one JSON file: `gencache generate CONFIG.json`. Point your editor at",
        "[`config.schema.json`](config.schema.json) for completion and checking: it is the schema of a config file as",
        f"written, and of a `{DEFAULTS_FILENAME}` too, so a config taking `model` (or anything else) from its "
        f"`{DEFAULTS_FILENAME}` validates. gencache checks the merged config: then `model.model_path`, "
        "`data_configs` and `output_dir` are required. In VS Code, for example:",
        "",
        "```",
        '"json.schemas": [{"fileMatch": ["configs/**/*.json"], "url": "./docs/config.schema.json"}]',
        "```",
        "",
        "`gencache init DIR` writes a config over local files that runs as is with the demo's tiny teacher.",
        "",
        "## Loading rules",
        "",
        f"- If the config's directory holds a `{DEFAULTS_FILENAME}`, it is deep-merged under the config first: the "
        "selected file wins, objects merge recursively, lists and scalars replace whole, and an explicit `null` "
        "stays `null`. One level only: no parent directories, no chains.",
        "- Unknown keys are errors at every level, including `data_kwargs` and `template_kwargs`, and the message "
        "names the key's path, e.g. `data_configs[1].data_kwargs.dificulty`.",
        "- Integers are strict: `true`/`false` and `1.0` are not integers. Strings are strict too.",
        "- Every error is one line: `<file>: <path>: <what is wrong>`, several separated by `;`. The CLI exits "
        "with code 2 and creates nothing.",
        "- Invalid JSON is reported with its line and column; duplicate keys in one object, `NaN`/`Infinity`, "
        "nesting deeper than 64 levels and a path that is not a regular file (a FIFO, a device) are errors, in "
        f"the config, its `{DEFAULTS_FILENAME}` and every `--set` value alike.",
        f"- Logit and score fields ({', '.join(f'`{n}`' for n in sorted(LOGIT_FIELDS))}) are rejected wherever "
        f"they appear (top level, `model`, `model.generation_kwargs`, a data config) with: *{NO_LOGITS_MESSAGE}*",
        "- After validation, `model.tokenizer_path` is explicit and `data_kwargs` / `template_kwargs` hold the "
        "effective values, defaults included. That effective config is what `resolved_config.json` records.",
        "",
    ]


def _model_lines(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> list[str]:
    return [
        "## Top level",
        "",
        *_field_table(CacheConfig, "", defs, _strip_defs(schema)),
        "",
        "## `model`",
        "",
        *_field_table(ModelConfig, "model.", defs, defs["ModelConfig"]),
        "",
    ]


def _generation_lines() -> list[str]:
    return [
        "### `model.generation_kwargs`",
        "",
        "Passed to transformers' `GenerationConfig`. The effective generation config is these values, then the "
        "teacher's `generation_config.json`, then transformers' defaults; `do_sample` is false unless asked, and "
        "under greedy decoding sampling parameters are dropped. `max_new_tokens` must end up a positive integer "
        "(from here or the teacher's `generation_config.json`); an explicit `null` unsets a value inherited from "
        f"`{DEFAULTS_FILENAME}`. The effective config is validated strictly before the weights load. These keys are "
        "type-checked when the config loads (and again on the effective config, the teacher's values included). "
        "A key of another decoding mode is dropped (sampling keys under greedy decoding, beam keys without beams). "
        "Before any weights load, a setting the chosen `engine` cannot honour exactly is refused unless it has its "
        "neutral value; keys not listed here are honoured by the `transformers` engine only, unless they keep "
        "transformers' default:",
        "",
        "| key | rule | decoding mode | neutral value | engines |",
        "|---|---|---|---|---|",
        *[
            f"| `{name}` | {table_cell(rule.text)} | {rule.mode} | {_neutral_text(rule.neutral)} | "
            f"{', '.join(f'`{engine}`' for engine in rule.engines) if rule.engines != ALL_ENGINES else 'all'} |"
            for name, rule in GENERATION_SETTINGS.items()
        ],
        "",
        "These keys are errors:",
        "",
        "| key | why |",
        "|---|---|",
        *[f"| `{name}` | logits and scores are never collected (format 3) |" for name in sorted(LOGIT_FIELDS)],
        *[f"| `{name}` | {table_cell(why)} |" for name, why in GENERATION_FORBIDDEN.items()],
        *[f"| `{name}` | {table_cell(why)} |" for name, why in GENERATION_UNSUPPORTED.items()],
        "",
    ]


def _engine_lines(defs: Mapping[str, Any]) -> list[str]:
    return [
        "## `engine_options` per engine",
        "",
        "Strict: an unknown option is an error. See [engines.md](engines.md) for which engine to pick.",
        "",
        *[
            line
            for name, model in ENGINE_OPTIONS.items()
            for line in (
                f"### `{name}`",
                "",
                *(
                    _field_table(model, "engine_options.", defs, defs[f"engine_options.{name}"])
                    if model.model_fields
                    else ["No options: `engine_options` must be empty."]
                ),
                "",
            )
        ],
    ]


def _data_config_lines(defs: Mapping[str, Any]) -> list[str]:
    from gencache.data.recipes import BUILTIN_DATASETS as DATASETS

    lines = [
        "## `data_configs[i]`",
        "",
        *_field_table(DataConfig, "", defs, defs["DataConfig"]),
        "",
        "Samples of all data configs are concatenated in order. Samples with equal semantic keys are generated "
        "once (first occurrence wins); duplicates are counted, and a warning lists keys whose duplicates rendered "
        "different prompts. A run whose data configs total 0 samples is an error.",
        "",
        "### `data_kwargs` per dataset",
        "",
    ]
    for name, recipe in DATASETS.items():
        kwargs_model = recipe.kwargs_model
        lines += [f"#### `{name}`", ""]
        hub_id = getattr(recipe, "hub_id", None)
        if hub_id:
            lines += [f"Canonical source (when `source` is null): `{hub_id}`.", ""]
        lines += [*_kwargs_table("data_kwargs", name, kwargs_model, defs), ""]
    return lines


def _kwargs_table(field: str, name: str, kwargs_model: Any, defs: Mapping[str, Any]) -> list[str]:
    """The table of one dataset's ``data_kwargs`` (or one template's ``template_kwargs``), or the line saying it
    takes none."""
    if kwargs_model.model_fields:
        return _field_table(kwargs_model, "", defs, defs[f"{field}.{name}"])
    return [f"No `{field}`: any key is an error."]


def _template_lines(defs: Mapping[str, Any]) -> list[str]:
    from gencache.data.prompts import TEMPLATES

    lines: list[str] = []
    lines += ["### `template_kwargs` per template", ""]
    for name, spec in TEMPLATES.items():
        kwargs_model = spec.kwargs_model
        needs = "needs a tokenizer" if spec.needs_tokenizer else "needs no tokenizer"
        summary = " ".join((type(spec).__doc__ or "").split())
        lines += [f"#### `{name}`", "", f"{summary} {needs.capitalize()}." if summary else f"{needs.capitalize()}.", ""]
        lines += [*_kwargs_table("template_kwargs", name, kwargs_model, defs), ""]
    return lines


def _example_lines() -> list[str]:
    example = parse_config(EXAMPLE_CONFIG, origin="EXAMPLE_CONFIG")
    lines: list[str] = []
    lines += [
        "## Example",
        "",
        f"A config relying on defaults (a `{DEFAULTS_FILENAME}` beside it could hold the `model` block):",
        "",
        *_example_block(EXAMPLE_CONFIG),
        "",
        "Its effective form, as `resolved_config.json` records it:",
        "",
        *_example_block(config_to_json(example)),
        "",
    ]
    return lines


def _strip_defs(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "$defs"}


def render_schema_text() -> str:
    """``docs/config.schema.json`` as text: the schema, indented, sorted keys, trailing newline."""
    return json.dumps(config_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _documents(root: Path) -> dict[Path, str]:
    from gencache.docgen.datasets import DATASETS_PATH, datasets_page

    return {
        MARKDOWN_PATH: render_config_markdown(),
        SCHEMA_PATH: render_schema_text(),
        DATASETS_PATH: datasets_page(root),
    }


def write_docs(root: Path) -> list[Path]:
    """Write ``docs/config.md``, ``docs/config.schema.json`` and the generated part of ``docs/datasets.md`` under
    the repository root ``root``; return the paths written."""
    written: list[Path] = []
    for relative, text in _documents(root).items():
        path = Path(root) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale_docs(root: Path) -> list[Path]:
    """The generated files under ``root`` that are missing or differ from what this module generates."""
    stale: list[Path] = []
    for relative, text in _documents(root).items():
        path = Path(root) / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gencache.docgen.config [--root DIR] [--check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m gencache.docgen.config",
        description="Generate docs/config.md, docs/config.schema.json and the columns in docs/datasets.md.",
    )
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: current directory)")
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if the files are out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_docs(args.root)
        for path in stale:
            print(f"out of date: {path} (run: uv run python -m gencache.docgen.config)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_docs(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
