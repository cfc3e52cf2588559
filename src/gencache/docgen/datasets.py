"""The generated part of docs/datasets.md: the columns every built-in dataset reads, from each recipe's declared
:attr:`~gencache.data.recipes.base.DatasetRecipe.columns`.

The page is hand-written except between two marker lines, which :func:`splice` fills in; ``python -m
gencache.docgen.config`` writes it with the config reference and a test fails when the checked-in page is stale.
"""

from __future__ import annotations

from pathlib import Path

DATASETS_PATH = Path("docs") / "datasets.md"
BEGIN = "<!-- BEGIN GENERATED COLUMNS: `uv run python -m gencache.docgen.config` writes this part; do not edit it -->"
END = "<!-- END GENERATED COLUMNS -->"


def table_cell(text: str) -> str:
    """``text`` as one Markdown table cell: pipes escaped, on one line (every generated docs table uses it)."""
    return text.replace("|", "\\|").replace("\n", " ")


def render_columns() -> str:
    """One table per built-in dataset: every column it reads, its JSON type, whether a row must have it, and
    what it is used for. Dotted names are nested fields (``context.sentences``); ``[]`` marks a list's items."""
    from gencache.data.recipes import BUILTIN_DATASETS

    lines = [
        "Every dataset checks its required columns when its table loads. A missing column is an error naming the",
        "column, the files read, the columns they hold and the closest of them (`did you mean 'q'?`), and the fix",
        "that fits: for a `<name>` column the `data_kwargs` field that asked for it (`data_kwargs.query`), for a",
        "fixed name the column to rename in the file. A missing or mistyped value names the file and its line (JSON",
        "Lines, CSV, TSV; blank lines count) or its row in the file (parquet, a JSON array), in the file's own",
        "order. Columns not listed are ignored. `<name>` stands for the column a `data_kwargs` option names.",
        "",
    ]
    for name, recipe in BUILTIN_DATASETS.items():
        tables = any(column.table for column in recipe.columns)
        lines += [f"#### `{name}` columns", ""]
        header = (
            ["table", "column", "type", "required", "used for"]
            if tables
            else ["column", "type", "required", "used for"]
        )
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for column in recipe.columns:
            cells = [
                *([f"`{column.table}`"] if tables else []),
                f"`{column.name}`",
                table_cell(column.type),
                "yes" if column.required else "no",
                table_cell(column.description),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def splice(page: str) -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by :func:`render_columns`."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"{DATASETS_PATH} must hold the marker lines {BEGIN!r} and {END!r} once each, in order.")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{render_columns()}\n{END}{tail}"


def datasets_page(root: Path) -> str:
    """docs/datasets.md under ``root`` with its generated part up to date (a page holding only that part when the
    file does not exist yet)."""
    path = Path(root) / DATASETS_PATH
    page = path.read_text(encoding="utf-8") if path.is_file() else f"# Datasets\n\n{BEGIN}\n{END}\n"
    return splice(page)
