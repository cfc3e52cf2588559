"""The checks a run makes before its weights load, as data: each :class:`CheckKind` is one line of the dry run's
report with where its problem is (a config field or a command-line option) and the checks it needs (a check whose
needs failed is skipped, saying which). :mod:`gencache.run.checks` runs them in order, phase 1 then phase 2.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckKind:
    """One check: its ``name`` in the report, the ``location`` its problem names and the checks it ``needs``."""

    name: str
    location: str
    needs: tuple[CheckKind, ...] = ()


def data_config_check(index: int) -> CheckKind:
    """The check of data config ``index`` on its own."""
    return CheckKind(f"data_configs[{index}]", f"data_configs[{index}]")


# -- phase 1: the config, the data files, what the machine shows without torch --------------------------------
PATHS = CheckKind("paths", "paths")
OUTPUT_PATH = CheckKind("output path", "output_dir", (PATHS,))
MODEL = CheckKind("model", "model.model_path")
TOKENIZER_PATH = CheckKind("tokenizer path", "model.tokenizer_path")
DATASETS = CheckKind("datasets", "data_configs")
SHARDS = CheckKind("shards", "--shards")
SHOW_PROMPT = CheckKind("show prompt", "--show-prompt")
DEVICE = CheckKind("device", "model.device")
ENGINE_PACKAGE = CheckKind("engine package", "engine")

# -- phase 2: the teacher and the tokenized samples -------------------------------------------------------------
TORCH_DEVICE = CheckKind("torch device", "model.device", (DEVICE,))
TOKENIZER = CheckKind("tokenizer", "model.tokenizer_path", (MODEL, TOKENIZER_PATH))
GENERATION = CheckKind("generation", "model.generation_kwargs", (TOKENIZER,))
ENGINE = CheckKind("engine", "engine_options", (GENERATION, DEVICE))
TEACHER_CONFIG = CheckKind("teacher config", "model.model_path", (MODEL,))
ATTENTION = CheckKind("attention", "model.attn_implementation", (DEVICE,))
TEACHER_WEIGHTS = CheckKind("teacher weights", "model.model_path", (MODEL,))
VOCABULARY = CheckKind("vocabulary", "model.tokenizer_path", (TOKENIZER, GENERATION, TEACHER_CONFIG))
SAMPLES = CheckKind("samples", "data_configs", (TOKENIZER,))
CONTEXT_LENGTH = CheckKind("context length", "model.generation_kwargs.max_new_tokens")
PROMPT_IDS = CheckKind("prompt ids", "data_configs", (VOCABULARY,))
PAGED_CACHE = CheckKind("paged cache", "engine_options.kv_cache_memory_gib", (TEACHER_CONFIG, ENGINE))
HEADER_BUDGET = CheckKind("header budget", "output_dir")

#: The checks of phase 2 in order, each listed as skipped when phase 1 found a problem.
TEACHER_CHECKS = (
    TORCH_DEVICE,
    TOKENIZER,
    GENERATION,
    ENGINE,
    TEACHER_CONFIG,
    ATTENTION,
    TEACHER_WEIGHTS,
    VOCABULARY,
    SAMPLES,
    CONTEXT_LENGTH,
    HEADER_BUDGET,
)
