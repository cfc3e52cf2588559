"""The samples of a run: every data config loaded, rendered, keyed and (with a tokenizer) tokenized.

Generation, dry runs, export and training all call :func:`build_samples`, so they agree on which samples exist, in
which order, and under which keys. The first occurrence of a key wins.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gencache.config import CacheConfig, DataConfig, parse_data_configs
from gencache.core.errors import ConfigError, DatasetError, PromptError, reworded
from gencache.data.keys import semantic_key
from gencache.data.prompts import TEMPLATES, Prompt, TokenizedPrompt, prompt_text, tokenize_prompt
from gencache.data.recipes import get_recipe
from gencache.data.sources import SourceInfo, shared_tables


class DuplicatePromptWarning(UserWarning):
    """Samples share a key but rendered different prompts; only the first occurrence is generated."""


@dataclass(frozen=True)
class Sample:
    """One sample of a run: its key and payload, its rendered (maybe tokenized) prompt, the source row it came from."""

    key: str
    data_config_index: int
    sample_index: int
    semantic: Mapping[str, Any]
    query: str
    answer: str
    parts: Prompt
    input_ids: tuple[int, ...] | None = None
    spans: tuple[tuple[str, int, int], ...] | None = None
    row: int | None = None
    row_id: str | int | None = None

    @property
    def reference(self) -> str | None:
        return self.answer or None

    @property
    def source_id(self) -> str | int | None:
        """The id that joins the sample back to its source row: ``row_id`` when the recipe read one, else ``row``."""
        return self.row if self.row_id is None else self.row_id

    @property
    def prompt_text(self) -> str:
        return prompt_text(self.parts)

    @property
    def prompt_chars(self) -> int:
        """The length of :attr:`prompt_text`, counted from the parts (a long prompt is never joined to count it)."""
        return sum(len(part.text) for part in self.parts)


@dataclass(frozen=True)
class DataConfigSummary:
    """What one data config contributed: ``duplicates`` counts its samples whose key appeared earlier in the run;
    the prompt lengths are (min, median_low, max), ``prompt_tokens`` None without a tokenizer."""

    index: int
    dataset_name: str
    samples: int
    unique: int
    duplicates: int
    prompt_chars: tuple[int, int, int]
    prompt_tokens: tuple[int, int, int] | None
    source: SourceInfo
    data_kwargs: dict[str, Any]
    answer_pattern: str | None = None


@dataclass(frozen=True)
class SampleSet:
    """Every sample of a run in run order, and what each data config contributed; :attr:`unique` holds the first
    occurrence of each key, which is what generation uses."""

    samples: tuple[Sample, ...]
    summaries: tuple[DataConfigSummary, ...]

    @functools.cached_property
    def _by_key(self) -> dict[str, Sample]:
        first: dict[str, Sample] = {}
        for sample in self.samples:
            first.setdefault(sample.key, sample)
        return first

    @functools.cached_property
    def unique(self) -> tuple[Sample, ...]:
        return tuple(self._by_key.values())

    @property
    def duplicates(self) -> int:
        return len(self.samples) - len(self._by_key)

    @functools.cached_property
    def conflicting_prompts(self) -> tuple[str, ...]:
        """The keys whose later occurrences rendered another prompt (they reuse the first one's teacher answer)."""
        return tuple(dict.fromkeys(s.key for s in self.samples if s.parts != self._by_key[s.key].parts))

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def __getitem__(self, index: int) -> Sample:
        return self.samples[index]

    def keys(self) -> list[str]:
        return [sample.key for sample in self.unique]

    def by_key(self, key: str) -> Sample:
        return self._by_key[key]


def concat_sample_sets(sets: Sequence[SampleSet]) -> SampleSet:
    """Several runs' samples as one set, data configs numbered on across the sets; a key's first occurrence wins."""
    samples: list[Sample] = []
    summaries: list[DataConfigSummary] = []
    for chosen in sets:
        offset = len(summaries)
        samples.extend(dataclasses.replace(s, data_config_index=s.data_config_index + offset) for s in chosen)
        summaries.extend(dataclasses.replace(s, index=s.index + offset) for s in chosen.summaries)
    return SampleSet(tuple(samples), tuple(summaries))


def _as_data_configs(config_or_data_configs: Any) -> list[DataConfig]:
    if isinstance(config_or_data_configs, CacheConfig):
        return list(config_or_data_configs.data_configs)
    return parse_data_configs(config_or_data_configs)


def tokenizer_reasons(
    config_or_data_configs: CacheConfig | Sequence[DataConfig | Mapping[str, Any]], *, first_index: int = 0
) -> list[str]:
    """Why these data configs need a tokenizer, a ``data_configs[i]: ...`` line each (``first_index``: the first i)."""
    reasons: list[str] = []
    for index, dc in enumerate(_as_data_configs(config_or_data_configs), start=first_index):
        if TEMPLATES[dc.template].needs_tokenizer:
            reasons.append(f"data_configs[{index}]: template {dc.template!r} renders with the tokenizer")
        if get_recipe(dc.dataset_name).needs_tokenizer(dc.data_kwargs):
            shown = ", ".join(f"{k}={v!r}" for k, v in sorted(dc.data_kwargs.model_dump(mode="json").items()))
            reasons.append(
                f"data_configs[{index}]: dataset {dc.dataset_name!r} with data_kwargs {{{shown}}} counts tokens"
            )
    return reasons


def _stats(values: Sequence[int]) -> tuple[int, int, int]:
    return (min(values), int(statistics.median_low(values)), max(values)) if values else (0, 0, 0)


def build_samples(
    config_or_data_configs: CacheConfig | Sequence[DataConfig | Mapping[str, Any]],
    tokenizer: Any | None = None,
    *,
    first_index: int = 0,
) -> SampleSet:
    """Load, render, key and (when ``tokenizer`` is given) tokenize every sample of the data configs, in order;
    every error names its data config (``first_index``: the first one's position in its config)."""
    data_configs = _as_data_configs(config_or_data_configs)
    if tokenizer is None:
        reasons = tokenizer_reasons(data_configs, first_index=first_index)
        if reasons:
            raise ConfigError(f"A tokenizer is needed but none was given: {'; '.join(reasons)}.")

    samples: list[Sample] = []
    summaries: list[DataConfigSummary] = []
    seen: set[str] = set()
    tokenized: dict[Prompt, TokenizedPrompt] = {}  # duplicates render identical prompts
    with shared_tables():  # data configs reading the same source share one load (and one file hash)
        for index, dc in enumerate(data_configs, start=first_index):
            try:
                raw_samples, source = get_recipe(dc.dataset_name).load(dc, dc.data_kwargs, tokenizer)
                loaded: list[Sample] = []
                for number, raw in enumerate(raw_samples):
                    parts = TEMPLATES[dc.template].render(raw.parts, dc.template_kwargs, tokenizer, raw.history)
                    if tokenizer is not None and parts not in tokenized:
                        tokenized[parts] = tokenize_prompt(parts, tokenizer)
                    ids, spans = tokenized.get(parts, (None, None))
                    loaded.append(
                        Sample(
                            key=semantic_key(raw.semantic),
                            data_config_index=index,
                            sample_index=number,
                            semantic=raw.semantic,
                            query=raw.query,
                            answer=raw.answer,
                            parts=parts,
                            input_ids=ids,
                            spans=spans,
                            row=raw.row,
                            row_id=raw.row_id,
                        )
                    )
            except (ConfigError, DatasetError, PromptError) as exc:
                raise reworded(exc, f"data_configs[{index}]: {exc}") from exc
            keys = {sample.key for sample in loaded}
            duplicates = len(loaded) - len(keys - seen)
            seen |= keys
            tokens = [len(sample.input_ids) for sample in loaded if sample.input_ids is not None]
            summaries.append(
                DataConfigSummary(
                    index=index,
                    dataset_name=dc.dataset_name,
                    samples=len(loaded),
                    unique=len(keys),
                    duplicates=duplicates,
                    prompt_chars=_stats([sample.prompt_chars for sample in loaded]),
                    prompt_tokens=_stats(tokens) if tokenizer is not None else None,
                    source=source,
                    data_kwargs=dc.data_kwargs.model_dump(mode="json"),
                    answer_pattern=dc.answer_pattern,
                )
            )
            samples.extend(loaded)
    if not samples:
        raise ConfigError("No samples: every data config has num_samples 0; raise num_samples of at least one.")
    result = SampleSet(tuple(samples), tuple(summaries))
    if result.conflicting_prompts:
        earlier = result.by_key(result.conflicting_prompts[0])
        later = next(sample for sample in samples if sample.key == earlier.key and sample.parts != earlier.parts)
        warnings.warn(
            f"{len(result.conflicting_prompts)} key(s) occur more than once with different rendered prompts; each "
            "is generated once, from its first occurrence, and the others reuse that answer (first: key "
            f"{earlier.key[:12]}... at data_configs[{earlier.data_config_index}] sample {earlier.sample_index} and "
            f"data_configs[{later.data_config_index}] sample {later.sample_index}).",
            DuplicatePromptWarning,
            stacklevel=2,
        )
    return result
