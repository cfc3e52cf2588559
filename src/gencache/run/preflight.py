"""Every check a run makes before the teacher's weights load, in order, for ``generate`` and the dry run alike:
every problem is listed at once; a check whose input failed is skipped, saying so. Phase 1 (the config, the data
files, what the machine shows without torch) imports no torch, so an input mistake is reported in about a second;
phase 2 (the teacher and the tokenized samples) runs only when phase 1 found nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError
from pydantic import ValidationError

from gencache.artifact.header import header_capacity
from gencache.artifact.publish import check_output_path, probe_rename
from gencache.artifact.store import Location
from gencache.artifact.upload import check_absent
from gencache.config.documents import read_merged_config
from gencache.config.engines import ContinuousOptions
from gencache.config.messages import collect_problems, format_loc, parse_loc, problem_lines
from gencache.config.models import CacheConfig, DataConfig, ModelConfig, parse_data_configs
from gencache.config.names import DTYPE_BYTES, ENGINE_VLLM
from gencache.config.paths import S3Url, looks_like_path
from gencache.core.errors import (
    ConfigError,
    GencacheError,
    OutputExistsError,
    Problem,
    ShardError,
    first_line,
    raise_problems,
    reworded,
)
from gencache.data.keys import semantic_key
from gencache.data.prompts import TEMPLATES
from gencache.data.recipes import get_recipe
from gencache.data.samples import DuplicatePromptWarning, Sample, SampleSet, build_samples
from gencache.data.sources import shared_tables
from gencache.generation import teacher as checks
from gencache.generation.effective import EffectiveGeneration, resolve_generation
from gencache.generation.engines import GIB, Engine
from gencache.generation.engines.transformers import size_paged_cache
from gencache.run.plan import (
    Override,
    Overrides,
    Plan,
    ShardSpec,
    Target,
    apply_override,
    check_utf8,
    full_split,
    make_plan,
    origin_of,
    parse_set,
    plan_targets,
)
from gencache.run.session import TeacherSession, build_engine

T = TypeVar("T")


@dataclass(frozen=True)
class Check:
    """One line of the dry-run report: ``status`` is ``ok``, ``failed`` or ``skipped``."""

    name: str
    status: str
    detail: str


@dataclass
class Preflight:
    """The checks' report (what ``gencache.dry_run`` returns): ``config`` is None for an invalid config, ``session``
    present once every check passed; while ``blocked`` says why, every check is skipped."""

    config: CacheConfig | None
    targets: list[Target]
    output_dir: Location | None = None
    published: list[Location] = field(default_factory=list)
    samples: SampleSet | None = None
    sample_counts: list[int] = field(default_factory=list)
    capacity: dict[Location, int] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    not_computed: list[str] = field(default_factory=list)
    prompt: Sample | None = None
    prompt_index: int | None = None
    session: TeacherSession | None = None
    blocked: str | None = None
    applied: Sequence[Override] = ()

    @property
    def errors(self) -> list[GencacheError]:
        return [problem.error for problem in self.problems]

    @property
    def exit_code(self) -> int:
        return self.problems[0].error.exit_code if self.problems else 0

    def skip(self, name: str, why: str) -> None:
        self.checks.append(Check(name, "skipped", self.blocked or why))

    def check(
        self, name: str, location: str, action: Callable[..., tuple[T, str]], *given: Any, needs: Sequence[str] = ()
    ) -> T | None:
        """Run check ``name`` on what earlier checks produced (``given``): its value, or None when it failed (its
        problem recorded at the error's own ``location``, else ``location``, named after the override that wrote it)
        or was skipped because a check it ``needs`` did not pass or a value it is given is missing."""
        blocked = [need for need in needs if any(c.name == need and c.status != "ok" for c in self.checks)]
        if self.blocked or blocked or any(value is None for value in given):
            self.skip(name, f"not checked: {', '.join(blocked)} failed" if blocked else "what it needs is unknown")
            return None
        try:
            value, detail = action(*given)
        except GencacheError as error:
            where = getattr(error, "location", None) or location
            self.checks.append(Check(name, "failed", str(error)))
            if (source := origin_of(parse_loc(where), self.applied)) is not None:
                error = reworded(error, f"{source}: {error}")
            self.problems.append(Problem(name, where, error, origin=source))
            return None
        self.checks.append(Check(name, "ok", detail))
        return value

    def run_session(self) -> TeacherSession:
        """The run's session, its teacher not loaded yet; the problems are raised."""
        raise_problems(self.problems)
        assert self.session is not None, "checks of a run that found no problem leave its session"
        return self.session


def plan_run(
    config_path: str | os.PathLike[str],
    overrides: Overrides,
    shard: str | None = None,
    shards: int | None = None,
    env: Mapping[str, str] | None = None,
    skip: bool = False,
    *,
    keep_split: bool = False,
) -> Plan:
    """The plan (:func:`gencache.run.plan.make_plan`) of ``config_path`` with its ``_default.json`` and ``overrides``,
    validated once. Every problem of the config (one per invalid field), the shard plan and the data files is raised
    at once: an invalid config's output path and the data configs that no problem is in are checked anyway."""
    problems: list[Problem] = []

    def problem(where: str, error: ConfigError, origin: str | None = None) -> None:
        problems.append(Problem("config", where, error, origin=origin or where))

    limit = overrides.limit
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        problem("--limit", ConfigError(f"--limit must be a positive number of samples, got {limit}."))
        limit = None
    try:
        current, origin = read_merged_config(config_path)  # read afresh: the overrides are applied in place
    except ConfigError as error:
        raise_problems([Problem("config", str(config_path), error, origin=str(config_path)), *problems])
    applied: list[Override] = []
    if (output_dir := overrides.output_dir) is not None:
        try:
            check_utf8("--output-dir path", output_dir)
            applied.append(apply_override(current, Override(f"--output-dir {output_dir}", ("output_dir",), output_dir)))
        except ConfigError as error:
            problem("--output-dir", error)
    for text in overrides.sets:
        try:
            applied.append(apply_override(current, parse_set(text)))
        except ConfigError as error:
            problem(f"--set {text}", error)
    if limit is not None and isinstance(configs := current.get("data_configs"), list):  # --limit caps each one
        for data_config in configs:
            count = data_config.get("num_samples") if isinstance(data_config, dict) else None
            if isinstance(count, int) and not isinstance(count, bool) and count > limit:
                data_config["num_samples"] = limit
    try:
        config, locs = CacheConfig.model_validate(current), []
    except ValidationError as exc:
        config, lines = None, problem_lines(collect_problems(exc, CacheConfig))
        for loc, line in lines:
            named = origin_of(loc, applied) or origin
            problem(format_loc(loc) or named, ConfigError(f"{named}: {line}"), named)
        locs = [loc for loc, _ in lines]
    targets: list[Target] = []
    if isinstance(output := current.get("output_dir"), str) and output and ("output_dir",) not in locs:
        try:  # a missing field is named at its parent: the file
            targets = plan_targets(output, shard, shards, env, keep_split)
        except ShardError as error:
            problems.append(error.problem or Problem("shards", "--shards" if shards is not None else "--shard", error))
    if config is None or problems:  # what validates on its own is checked too
        alone: list[tuple[int, DataConfig]] = []
        for index, item in enumerate(items if isinstance(items := current.get("data_configs"), list) else []):
            with contextlib.suppress(GencacheError):  # one with a problem of its own fails alone too
                alone.append((index, parse_data_configs([item])[0]))
        found = Preflight(None, [] if skip else targets, applied=applied)
        with shared_tables():
            _phase_one(found, alone, None)
        raise_problems(problems + found.problems)
    assert config is not None
    return make_plan(config, overrides, applied, targets, skip)


def preflight(
    plan: Plan, env: Mapping[str, str] | None, show_prompt: int | None = None, *, check_output: bool = True
) -> Preflight:
    """Every check for ``plan``'s targets still to generate; ``show_prompt`` is the sample whose prompt the report
    carries; ``check_output=False`` leaves the output path unchecked (``--show-prompt`` alone writes nothing)."""
    config, shard = plan.config, plan.targets[0].shard
    found = Preflight(
        config, plan.pending, plan.output_dir, plan.published, prompt_index=show_prompt, applied=plan.applied
    )
    with shared_tables():  # phase 2 builds the samples again (tokenized) from the tables phase 1 read
        rename_mode, keys = _phase_one(found, list(enumerate(config.data_configs)), shard, check_output)
        device = found.check("device", "model.device", lambda: _device(config.model.device, shard, env))
        found.check("engine package", "engine", _engine_package, config.engine)
        if found.problems or device is None:
            found.blocked = "not checked: the teacher's checks run once the problems above are fixed"
            found.not_computed.append("the teacher's checks")
        device, model = device or "cpu", config.model
        found.check("torch device", "model.device", _torch_device, device)
        tokenizer = found.check("tokenizer", "model.tokenizer_path", _tokenizer, model)
        generation = found.check(
            "generation", "model.generation_kwargs", _generation, model, tokenizer, needs=["tokenizer"]
        )

        def engine_of(generation: EffectiveGeneration, tokenizer: Any) -> tuple[Engine, str]:
            return build_engine(config, generation=generation, tokenizer=tokenizer, device=device), config.engine

        engine = found.check("engine", "engine_options", engine_of, generation, tokenizer, needs=["generation"])
        teacher = found.check("teacher config", "model.model_path", _teacher_config, model)
        found.check(
            "attention",
            "model.attn_implementation",
            lambda: (None, checks.check_attn_implementation(model.attn_implementation, device)),
        )
        found.check(
            "teacher weights", "model.model_path", lambda: (None, checks.check_teacher_weights(model.model_path))
        )
        vocab_size = getattr(teacher.get_text_config(), "vocab_size", None) if teacher is not None else None
        vocab_size = vocab_size if isinstance(vocab_size, int) and vocab_size > 0 else None  # the embedding's rows

        def vocabulary(tokenizer: Any, generation: EffectiveGeneration) -> tuple[None, str]:
            if vocab_size is None:
                return None, "not checked: config.json records no vocab_size"
            return None, checks.check_vocabulary(tokenizer, vocab_size, generation.kwargs)

        needs = ["tokenizer", "generation", "teacher config"]
        found.check("vocabulary", "model.tokenizer_path", vocabulary, tokenizer, generation, needs=needs)
        samples = found.check("samples", "data_configs", _samples, config, tokenizer, needs=["tokenizer"])
        if samples is None or generation is None:
            for name in ("context length", "header budget"):
                found.skip(name, "not computed: needs the samples and generation config")
            found.not_computed += ["prompt token counts", "the context-length check", "the header budget"]
            return found
        found.samples = samples
        every = samples.keys()
        found.targets = [
            Target(t.output_dir, t.shard, tuple(t.shard.select(every) if t.shard else every)) for t in found.targets
        ]
        if keys is None:  # phase 1 could not count the keys: the shard count and --show-prompt are checked here
            _counted(found, [sample.key for sample in samples], shard)
        if found.prompt_index is not None and 0 <= found.prompt_index < len(samples):
            found.prompt = samples[found.prompt_index]
        found.check(
            "context length",
            "model.generation_kwargs.max_new_tokens",
            lambda: _context(samples, generation, teacher),
        )
        if vocab_size is not None:
            found.check("prompt ids", "data_configs", _prompt_ids, samples, vocab_size, needs=["vocabulary"])
        options = config.engine_options
        if isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None:
            where, needs = "engine_options.kv_cache_memory_gib", ["teacher config", "engine"]
            found.check("paged cache", where, _paged_cache, config, samples, generation, teacher, needs=needs)
        found.capacity = found.check("header budget", "output_dir", _budget, found.targets, generation) or {}
        if not found.problems and engine is not None and rename_mode is not None:
            inputs = (found.targets, device, tokenizer, generation, engine, samples, found.capacity, rename_mode)
            found.session = TeacherSession(plan, *inputs)
    return found


def input_keys(plan: Plan) -> list[str]:
    """Phase 1 for ``plan`` (the device is each Ray worker's), every problem raised; the run's unique keys."""
    found = Preflight(plan.config, plan.pending, applied=plan.applied)
    keys = _phase_one(found, list(enumerate(plan.config.data_configs)), plan.targets[0].shard)[1]
    raise_problems(found.problems)
    return list(dict.fromkeys(keys or []))


# -- phase 1: the config, the data files, what the machine shows without torch ----------------------------------
def _phase_one(
    found: Preflight, data_configs: Sequence[tuple[int, DataConfig]], shard: ShardSpec | None, check_output: bool = True
) -> tuple[str | None, list[str] | None]:
    """Phase 1 (of an invalid config: its data configs that validate alone); the rename mode the run publishes with
    and the run's keys, each None when unknown."""
    config, outputs = found.config, [target.output_dir for target in found.targets]
    named = {"working directory": os.getcwd(), "output path": str(outputs[0]) if outputs else ""}
    if config is not None:
        model = config.model
        named |= {"model.model_path": model.model_path, "model.tokenizer_path": model.effective_tokenizer_path}

    def paths() -> tuple[None, str]:
        for what, path in named.items():
            check_utf8(what, path)
        return None, "working directory and output path are valid UTF-8"

    found.check("paths", "paths", paths)
    rename_mode = None
    if check_output:
        rename_mode = found.check("output path", "output_dir", lambda: _output_location(outputs), needs=["paths"])
    else:
        found.skip("output path", "not checked: --show-prompt writes nothing")
    if config is not None:
        found.check("model", "model.model_path", _model_location, "model.model_path", model)
        if model.effective_tokenizer_path != model.model_path:
            found.check("tokenizer path", "model.tokenizer_path", _model_location, "model.tokenizer_path", model)
    keys: list[str] | None = []
    with warnings.catch_warnings():  # a recipe's warnings come once, with the samples of phase 2
        warnings.simplefilter("ignore")
        for index, dc in data_configs:
            read = found.check(f"data_configs[{index}]", f"data_configs[{index}]", _data_config, index, dc)
            found.sample_counts.append(-1 if read is None else len(read))
            keys = None if read is None or keys is None else keys + read
    if data_configs and all(dc.num_samples == 0 for _, dc in data_configs):

        def some() -> tuple[None, str]:
            raise ConfigError("No samples: every data config has num_samples 0; raise at least one.")

        found.check("datasets", "data_configs", some)
    if keys is not None:
        _counted(found, keys, shard)
    return rename_mode, keys


def _output_location(outputs: Sequence[Location]) -> tuple[str | None, str]:
    """Every output path is absent and the nearest existing ancestor of its parent can hold it (or every prefix is
    free in a bucket that answers); the publish rename mode."""
    if not outputs:
        return None, "every output is already published"
    if remote := [output for output in outputs if isinstance(output, S3Url)]:
        for prefix in remote:
            check_absent(prefix)
        shown = str(remote[0]) if len(remote) == 1 else f"{len(remote)} shard prefixes beside {remote[0]}"
        return "s3", f"{shown} is free; commit with a conditional create"
    local = [output for output in outputs if isinstance(output, Path)]
    for output in local:
        try:
            check_output_path(output)
        except OutputExistsError as error:
            free = next((c for n in range(2, 100) if not os.path.lexists(c := f"{output}-{n}")), None)
            raise OutputExistsError(f"{error} {free} is free.") if free else error from None
    parent = ancestor = local[0].parent
    while not os.path.lexists(ancestor) and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not (ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)):
        raise ConfigError(f"Output parent {ancestor} is not a writable directory; choose an output_dir under one.")
    try:
        mode = probe_rename(ancestor)
    except GencacheError as error:
        raise ConfigError(f"The output location {parent} cannot be used: {error}") from None
    shown = str(local[0]) if len(local) == 1 else f"{len(local)} shard directories beside {local[0]}"
    return mode, f"{shown} is free; publish with {mode}"


def _model_location(field_name: str, model: ModelConfig) -> tuple[None, str]:
    """A local model or tokenizer directory exists and its JSON files parse; a hub id is reachable or cached, and
    its ``config.json`` parses."""
    value = model.model_path if field_name == "model.model_path" else model.effective_tokenizer_path
    path = Path(value).expanduser()
    if os.path.isdir(path):
        if field_name == "model.model_path" and not (path / "config.json").is_file():
            raise ConfigError(f"{field_name} {path} has no config.json; point it at a save_pretrained directory.")
        files = sorted(file for file in path.glob("*.json") if file.is_file())
        for file in files:  # a broken one is named with its line and column before any model library is imported
            checks.read_json_file(file)
        return None, f"local directory {path.absolute()} ({len(files)} JSON file{'s' if len(files) != 1 else ''} read)"
    if os.path.lexists(path) or looks_like_path(value):
        problem = "is not a directory" if os.path.lexists(path) else "does not exist"
        raise ConfigError(f"{field_name} {path.absolute()} {problem}; fix the path or give a hub id.")
    try:  # huggingface_hub's offline mode, timeouts and fall-back to its local cache when the hub is unreachable
        checks.read_json_file(hf_hub_download(value, "config.json", revision=model.revision))
    except LocalEntryNotFoundError:
        at = f" at revision {model.revision!r}" if model.revision else ""
        raise ConfigError(
            f"{field_name} {value!r}{at} is a hub id neither reachable (no network, or HF_HUB_OFFLINE=1) nor in the "
            "local hub cache; download it, point HF_HOME at a cache that holds it, or give a local path."
        ) from None
    except EntryNotFoundError:  # a repository without config.json (a tokenizer's): its load says what it misses
        pass
    except (HfHubHTTPError, ValueError) as error:  # no such repository or revision, gated, an invalid id
        raise ConfigError(f"{field_name} {value!r}: {first_line(error)}") from None
    return None, f"hub id {value}"


def _data_config(index: int, dc: DataConfig) -> tuple[list[str] | None, str]:
    """The keys of data config ``index`` read from its source, or None when the recipe counts tokens."""
    recipe = get_recipe(dc.dataset_name)
    if recipe.needs_tokenizer(dc.data_kwargs):
        return None, f"{dc.dataset_name} counts teacher tokens: checked once the tokenizer loads"
    try:
        if dc.num_samples and not TEMPLATES[dc.template].needs_tokenizer:
            built = build_samples([dc], first_index=index)  # the prompts too: the template renders without a tokenizer
            keys, source = [sample.key for sample in built], built.summaries[0].source
        else:
            raw, source = recipe.load(dc, dc.data_kwargs, None)
            keys = [semantic_key(sample.semantic) for sample in raw]
    except GencacheError as error:
        prefix, text = f"data_configs[{index}]", str(error)
        named = reworded(error, text if text.startswith(prefix) else f"{prefix}: {text}")
        field_name = getattr(error, "field", None)
        named.location = f"{prefix}.{field_name}" if field_name else prefix  # type: ignore[attr-defined]
        raise named from None
    where = f"{source.kind} {source.location}" if source.location else source.kind
    return keys, f"{dc.dataset_name}: {len(keys)} samples, {len(set(keys))} unique keys, from {where}"


def _counted(found: Preflight, keys: list[str], shard: ShardSpec | None) -> None:
    """The checks of the run's keys (every sample's): ``--shards N`` with more shards than unique keys is refused
    (a shard of ``--shard I/N`` may be empty), and ``--show-prompt`` names one of the samples."""
    unique, total = len(set(keys)), len(keys)

    def count(shard: ShardSpec) -> tuple[None, str]:
        if shard.count > max(unique, 1):
            most = full_split(keys, shard.count)
            raise ShardError(
                f"{shard.origin} {shard.count} for {unique} keys leaves some empty; use at most {most} shards."
            )
        return None, f"{shard.count} shards over {unique} unique keys"

    def shown(index: int) -> tuple[None, str]:
        if not 0 <= index < total:
            raise ConfigError(f"--show-prompt {index} is out of range: the run has {total} samples (0..{total - 1}).")
        return None, f"sample {index} of {total}"

    if shard is not None and shard.origin == "--shards":
        found.check("shards", "--shards", count, shard)
    if found.prompt_index is not None:
        found.check("show prompt", "--show-prompt", shown, found.prompt_index)


def _device(device: str, shard: ShardSpec | None, env: Mapping[str, str] | None) -> tuple[str, str]:
    """This rank's device and what can be known of it without torch (whether torch sees it is phase 2's). Under a
    multi-process launcher ``cuda`` or ``cuda:0`` is ``cuda:LOCAL_RANK``, or ``cuda:0`` when ``CUDA_VISIBLE_DEVICES``
    leaves exactly one GPU; another index or ``auto`` is ambiguous."""
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if shard is not None and shard.local_rank is not None and device != "cpu":
        if device not in ("cuda", "cuda:0"):
            raise ShardError(f'model.device {device!r} under {shard.origin}: set "cuda" (cuda:LOCAL_RANK per rank).')
        one = len([d for d in (visible or "").split(",") if d.strip()]) == 1
        device = "cuda:0" if one else f"cuda:{shard.local_rank}"
    if device == "cpu":
        return device, "cpu"
    if device == "auto":
        if importlib.util.find_spec("accelerate") is None:
            raise ConfigError('model.device "auto" needs the accelerate package; install it or name a device.')
        return device, "auto (device_map)"
    choose = 'set model.device to "cpu" (in the config, or --set model.device=cpu) or run on a machine with a GPU'
    if visible is not None and not visible.strip():
        raise ConfigError(f"model.device {device!r}: CUDA_VISIBLE_DEVICES is empty, so no GPU is visible; {choose}.")
    # What shows a GPU driver without loading it: NVIDIA's device nodes, AMD's ROCm node (torch's "cuda" device runs
    # on ROCm too), WSL's GPU node, and NVIDIA's driver library (opened, never initialised: a CUDA context made here
    # would break the processes vLLM forks later).
    evidence = [node for nodes in ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg") for node in sorted(glob.glob(nodes))]
    with contextlib.suppress(OSError):
        ctypes.CDLL("libcuda.so.1")
        evidence.append("libcuda.so.1")
    if not evidence:
        default = " (the default)" if device == ModelConfig.model_fields["device"].default else ""
        raise ConfigError(
            f"model.device {device!r}{default}: this machine has no GPU driver (no libcuda.so.1, /dev/nvidia*, "
            f"/dev/kfd or /dev/dxg); {choose}."
        )
    return device, f"{device}: GPU driver found ({', '.join(evidence[:3])}); torch checks the device with the teacher"


def _engine_package(engine: str) -> tuple[None, str]:
    from gencache.generation.engines.vllm import INSTALL_HINT, installed_build

    if engine == ENGINE_VLLM and installed_build() is None:
        raise ConfigError(f'engine "vllm" needs the vllm package: {INSTALL_HINT}; or set engine to "transformers".')
    return None, f"{engine}: installed"


# -- phase 2: the teacher and the tokenized samples -----------------------------------------------------------------
def _torch_device(device: str) -> tuple[None, str]:
    """The device exists on this machine as torch sees it (the config admits only devices torch can name)."""
    if not device.startswith("cuda"):
        return None, device
    import torch

    index = torch.device(device).index or 0
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f'model.device {device!r}: torch sees {count} CUDA device(s); name one or set it to "cpu".')
    return None, f"{device} ({torch.cuda.get_device_name(index)})"


def _tokenizer(model: ModelConfig) -> tuple[Any, str]:
    got = checks.load_tokenizer(model.effective_tokenizer_path, revision=model.revision)
    return got, f"{type(got).__name__}, pad id {got.pad_token_id}, eos id {got.eos_token_id}"


def _generation(model: ModelConfig, tokenizer: Any) -> tuple[EffectiveGeneration, str]:
    effective = resolve_generation(
        model.generation_kwargs, model_path=model.model_path, revision=model.revision, tokenizer=tokenizer
    )
    shown = f"max_new_tokens {effective.max_new_tokens}, {effective.num_return_sequences} sequence(s) per prompt"
    return effective, shown


def _teacher_config(model: ModelConfig) -> tuple[Any, str]:
    """The teacher's ``config.json`` (no weights; phase 1 parsed it, naming invalid JSON's line and column)."""
    from transformers import AutoConfig

    try:
        teacher = AutoConfig.from_pretrained(model.model_path, revision=model.revision)
    except Exception as error:
        raise ConfigError(f"Unreadable config.json in {model.model_path!r}: {first_line(error)}") from None
    positions = checks.max_positions(teacher)
    return teacher, f"{positions} positions" if positions else "config.json records no maximum positions"


def _samples(config: CacheConfig, tokenizer: Any) -> tuple[SampleSet, str]:
    with warnings.catch_warnings():  # reported by the caller, from samples.conflicting_prompts
        warnings.simplefilter("ignore", DuplicatePromptWarning)
        built = build_samples(config, tokenizer=tokenizer)
    return built, f"{len(built)} samples, {len(built.unique)} unique keys, {built.duplicates} duplicates"


def _context(samples: SampleSet, generation: EffectiveGeneration, teacher: Any) -> tuple[None, str]:
    lengths = [(s.prompt_tokens[2], f"data_configs[{s.index}]") for s in samples.summaries if s.prompt_tokens]
    longest, where = max(lengths, key=lambda length: length[0], default=(0, "-"))
    if (positions := checks.max_positions(teacher)) is None:
        return None, "not checked: the teacher's config.json records no maximum positions"
    if longest + generation.max_new_tokens > positions:
        room = positions - longest
        advice = f"lower max_new_tokens to at most {room}" if room > 0 else "shorten the prompts"
        raise ConfigError(
            f"model.generation_kwargs.max_new_tokens {generation.max_new_tokens} plus the longest prompt ({longest} "
            f"tokens, {where}) goes beyond the teacher's {positions} positions (config.json); {advice}."
        )
    return None, f"longest prompt {longest} + max_new_tokens {generation.max_new_tokens} <= {positions} positions"


def _prompt_ids(samples: SampleSet, vocab_size: int) -> tuple[None, str]:
    top = max(samples.unique, key=lambda sample: max(sample.input_ids or (-1,)), default=None)
    largest = max(top.input_ids or (-1,)) if top else -1
    where = f"data_configs[{top.data_config_index}] sample {top.sample_index}" if top else "-"
    if largest >= vocab_size:
        raise ConfigError(
            f"model.tokenizer_path: prompt token id {largest} ({where}) is outside the teacher's {vocab_size:,}-row "
            "embedding (vocab_size in config.json); use the teacher's tokenizer."
        )
    return None, f"largest prompt token id {largest} < {vocab_size:,}"


def _paged_cache(
    config: CacheConfig, samples: SampleSet, generation: EffectiveGeneration, teacher: Any
) -> tuple[None, str]:
    """``kv_cache_memory_gib`` holds one request of the longest prompt plus ``max_new_tokens`` (the engine's sizing)."""
    options = config.engine_options
    assert isinstance(options, ContinuousOptions) and options.kv_cache_memory_gib is not None
    lengths = [len(sample.input_ids or ()) for sample in samples.unique]
    try:
        sizing = size_paged_cache(
            lengths,
            generation.max_new_tokens,
            len(lengths) * generation.num_return_sequences,
            options,
            model_config=teacher,
            dtype_bytes=DTYPE_BYTES[config.model.dtype],
            budget=(int(options.kv_cache_memory_gib * GIB), "engine_options.kv_cache_memory_gib"),
        )
    except Exception as error:  # too small (a failure of the run, refused here), or no attention sizes in config.json
        raise ConfigError(f"engine_options.kv_cache_memory_gib: the paged cache: {first_line(error)}") from None
    return None, f"{sizing.num_blocks} blocks of {sizing.page_size} tokens, {sizing.concurrency} requests at once"


def _budget(targets: list[Target], generation: EffectiveGeneration) -> tuple[dict[Location, int], str]:
    capacities = {
        target.output_dir: header_capacity(len(target.keys), generation.num_return_sequences, generation.max_new_tokens)
        for target in targets
    }
    return capacities, f"{max(capacities.values(), default=0):,} bytes reserved for the largest artifact"
