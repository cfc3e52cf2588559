"""One generation run: config -> samples -> every model-free check -> teacher -> writer -> publish.

Everything that needs no weights (config, shard, output path, tokenizer, effective generation config, datasets,
sample count, header budget, rename support) runs before the model loads, so a bad run fails in seconds.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from gencache import __version__
from gencache.artifact.header import header_capacity
from gencache.artifact.manifest import make_provenance
from gencache.artifact.names import shard_dir_name
from gencache.data.config import CacheConfig, config_to_json, load_config
from gencache.data.samples import DuplicatePromptWarning, SampleSet, build_samples, needs_tokenizer
from gencache.errors import GenerationError, OutputExistsError, Terminated
from gencache.sharding import ShardSpec, device_for_rank, resolve_shard, run_digest
from gencache.tokenizer import tokenizer_state

if TYPE_CHECKING:
    from gencache.generation.generate import EffectiveGeneration


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, fixed before any weights load."""

    config: CacheConfig
    config_json: dict[str, Any]
    shard: ShardSpec | None
    output_dir: Path
    samples: SampleSet
    keys: tuple[str, ...]
    run_digest: str


def _absolute(path: str) -> Path:
    """``output_dir`` relative to the working directory, made absolute without resolving symlinks."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def output_path_for(config: CacheConfig, shard: ShardSpec | None) -> Path:
    """The directory this process publishes: ``output_dir`` or its shard directory."""
    base = _absolute(config.output_dir)
    if shard is None:
        return base
    return Path(shard_dir_name(str(base), shard.index, shard.count))


def plan_run(config: CacheConfig, shard: ShardSpec | None, tokenizer: Any | None) -> RunPlan:
    """Build every sample and pick this shard's unique keys (first occurrence wins)."""
    config_json = config_to_json(config)
    with warnings.catch_warnings():  # reported once, by the caller, from samples.conflicting_prompts
        warnings.simplefilter("ignore", DuplicatePromptWarning)
        samples = build_samples(config, tokenizer=tokenizer)
    keys = samples.keys()
    if shard is not None:
        keys = shard.select(keys)
    return RunPlan(
        config=config,
        config_json=config_json,
        shard=shard,
        output_dir=output_path_for(config, shard),
        samples=samples,
        keys=tuple(keys),
        run_digest=run_digest(config_json),
    )


def render_plan(plan: RunPlan, console: Console, *, capacity: int | None, max_new_tokens: int | None) -> None:
    """The dry-run report: one row per data config, then the run's totals and header budget."""
    table = Table(title=f"gencache dry run: {plan.output_dir}")
    for column in ("#", "dataset", "split", "template", "samples", "unique", "duplicates", "prompt chars min/med/max"):
        table.add_column(column, justify="right" if column in ("#", "samples", "unique", "duplicates") else "left")
    has_tokens = any(s.prompt_tokens is not None for s in plan.samples.summaries)
    if has_tokens:
        table.add_column("prompt tokens min/med/max")
    for summary, data_config in zip(plan.samples.summaries, plan.config.data_configs, strict=True):
        row = [
            str(summary.index),
            summary.dataset_name,
            data_config.split,
            data_config.template,
            str(summary.samples),
            str(summary.unique),
            str(summary.duplicates),
            "{} / {} / {}".format(*summary.prompt_chars),
        ]
        if has_tokens:
            row.append("{} / {} / {}".format(*summary.prompt_tokens) if summary.prompt_tokens else "-")
        table.add_row(*row)
    console.print(table)
    console.print(
        f"samples: {len(plan.samples)}   unique keys: {len(plan.samples.unique)}   "
        f"duplicates: {plan.samples.duplicates}"
    )
    warn_conflicting_prompts(plan, console)
    if plan.shard is not None:
        console.print(f"shard {plan.shard.index}/{plan.shard.count} ({plan.shard.origin}): {len(plan.keys)} keys")
    if capacity is not None:
        console.print(
            f"header budget: {capacity:,} bytes for {len(plan.keys)} entries x max_new_tokens {max_new_tokens}"
        )
    else:
        console.print("header budget: unknown until the teacher's generation_config.json supplies max_new_tokens")
    if os.path.lexists(plan.output_dir):
        console.print(f"[red]output path exists:[/red] {plan.output_dir} (generate would refuse it)")


def warn_conflicting_prompts(plan: RunPlan, console: Console) -> None:
    """One warning line when samples with equal keys rendered different prompts (the first one is generated)."""
    if plan.samples.conflicting_prompts:
        console.print(
            f"[yellow]warning:[/yellow] {len(plan.samples.conflicting_prompts)} duplicated keys rendered different "
            "prompts (another template or rendering option); the first occurrence's prompt is generated for all."
        )


def _dry_run_max_new_tokens(config: CacheConfig) -> tuple[int | None, int]:
    """``(max_new_tokens, num_return_sequences)`` for the header budget, from the config or else the teacher's
    generation config when it is readable without weights (None when it is not)."""
    kwargs = config.model.generation_kwargs
    returns = kwargs.get("num_return_sequences")
    value = kwargs.get("max_new_tokens")
    if value is None or returns is None:
        from gencache.errors import GencacheError
        from gencache.generation.generate import read_teacher_generation_config

        try:
            teacher = read_teacher_generation_config(config.model.model_path, revision=config.model.revision)
        except GencacheError:  # unreachable here; the real run reads it before any weights load
            teacher = {}
        value = teacher.get("max_new_tokens") if value is None else value
        returns = teacher.get("num_return_sequences") if returns is None else returns
    max_new_tokens = value if isinstance(value, int) and not isinstance(value, bool) else None
    sequences = returns if isinstance(returns, int) and not isinstance(returns, bool) and returns > 0 else 1
    return max_new_tokens, sequences


def resolved_config(
    plan: RunPlan,
    *,
    generation: EffectiveGeneration,
    tokenizer: Any,
    model: Any,
    rename_mode: str,
    batch_policy: Mapping[str, Any],
) -> dict[str, Any]:
    """Everything needed to reproduce and audit the run (provenance only; training never reads it)."""
    from gencache.data.prompts import chat_template_digest
    from gencache.generation.generate import runtime_info

    # The recorded config must rebuild the same samples from any working directory (gencache export does):
    # local sources and local model/tokenizer directories are made absolute; hub ids stay as they are.
    config_json = copy.deepcopy(plan.config_json)
    config_json["output_dir"] = str(_absolute(plan.config.output_dir))
    for data_config, summary in zip(config_json["data_configs"], plan.samples.summaries, strict=True):
        if summary.source.kind in ("directory", "file"):
            data_config["source"] = summary.source.location
    for field in ("model_path", "tokenizer_path"):
        value = config_json["model"].get(field)
        if isinstance(value, str) and os.path.exists(value):
            config_json["model"][field] = os.path.abspath(value)
    model_config = getattr(model, "config", None)
    return {
        "format_version": 3,
        "gencache_version": __version__,
        "config": config_json,
        "output_dir": str(plan.output_dir),
        "working_directory": os.getcwd(),
        "run_digest": plan.run_digest,
        "shard": None if plan.shard is None else plan.shard.summary(plan.run_digest) | {"origin": plan.shard.origin},
        "sources": [s.source.to_json() for s in plan.samples.summaries],
        "data_kwargs": [dict(s.data_kwargs) for s in plan.samples.summaries],
        "generation": generation.kwargs,
        "tokenizer": tokenizer_state(tokenizer),
        "chat_template_sha256": chat_template_digest(tokenizer),
        "tokenization": {
            "scheme": "per-part",
            "add_special_tokens": False,
            "padding_side": "left",
            "description": "each inline text and each document tokenized separately, ids concatenated",
        },
        "batching": dict(batch_policy),
        "model": {
            "model_path": plan.config.model.model_path,
            "revision": plan.config.model.revision,
            "commit_hash": getattr(model_config, "_commit_hash", None),
        },
        "runtime": runtime_info(model),
        "publish": {"rename": rename_mode},
        "samples": {
            "total": len(plan.samples),
            "unique": len(plan.samples.unique),
            "generated": len(plan.keys),
            "duplicates": plan.samples.duplicates,
            "conflicting_prompts": len(plan.samples.conflicting_prompts),
        },
    }


def _check_published(output_dir: Path, digest: str, console: Console) -> bool:
    """True when ``output_dir`` is a verified artifact of the same run (for ``--skip-published``)."""

    from gencache.artifact.reader import read_resolved_config, verify

    problems = verify(output_dir)
    if problems:
        raise OutputExistsError(
            f"{output_dir} exists but does not verify ({problems[0]}); move it aside and rerun this shard."
        )
    if read_resolved_config(output_dir).get("run_digest") != digest:
        raise OutputExistsError(
            f"{output_dir} exists but belongs to another run (its config differs); choose a new output_dir."
        )
    console.print(f"already published and verified: {output_dir}")
    return True


def run_generate(
    config_path: str | os.PathLike[str],
    *,
    shard: str | None = None,
    skip_published: bool = False,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    console: Console | None = None,
) -> Path | None:
    """Generate and publish the artifact of ``config_path``; return its path (None for a dry run or a skip)."""
    console = console or Console(stderr=True)
    config = load_config(config_path)
    shard_spec = resolve_shard(shard, env)
    output_dir = output_path_for(config, shard_spec)

    if dry_run:
        tokenizer = None
        if needs_tokenizer(config.data_configs):
            from gencache.generation.generate import load_tokenizer

            tokenizer = load_tokenizer(config.model.effective_tokenizer_path, revision=config.model.revision)
        plan = plan_run(config, shard_spec, tokenizer)
        max_new_tokens, returns = _dry_run_max_new_tokens(config)
        capacity = None if max_new_tokens is None else header_capacity(len(plan.keys), returns, max_new_tokens)
        render_plan(plan, console, capacity=capacity, max_new_tokens=max_new_tokens)
        return None

    if skip_published and os.path.lexists(output_dir):
        _check_published(output_dir, run_digest(config_to_json(config)), console)
        return None

    previous = _terminate_with_a_message()
    try:
        return _generate(config, shard_spec, output_dir, env, console)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate_with_a_message() -> Any:
    """Until the artifact build takes over signals, SIGTERM raises :class:`Terminated` (one line, exit 143) instead
    of killing the process silently while the tokenizer, datasets or model load; returns the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return None

    def handler(signum: int, frame: Any) -> None:
        raise Terminated("Terminated by SIGTERM before generation started; nothing was published.")

    signal.signal(signal.SIGTERM, handler)
    return previous


def _generate(
    config: CacheConfig,
    shard_spec: ShardSpec | None,
    output_dir: Path,
    env: Mapping[str, str] | None,
    console: Console,
) -> Path:

    from gencache.artifact.phases import report_phase
    from gencache.artifact.publish import check_output_path, probe_rename
    from gencache.artifact.writer import ArtifactBuild
    from gencache.generation.generate import (
        batching_policy,
        generate_entries,
        load_teacher,
        load_tokenizer,
        resolve_generation,
        seed_everything,
    )
    from gencache.progress import make_progress

    check_output_path(output_dir)
    device = device_for_rank(config.model.device, shard_spec, env)
    tokenizer = load_tokenizer(config.model.effective_tokenizer_path, revision=config.model.revision)
    generation = resolve_generation(
        config.model.generation_kwargs,
        model_path=config.model.model_path,
        revision=config.model.revision,
        tokenizer=tokenizer,
    )
    plan = plan_run(config, shard_spec, tokenizer)  # build_samples refuses a run of zero samples
    if not plan.keys and shard_spec is not None:  # still published (empty), so the set of shards is complete
        console.print(f"[yellow]warning:[/yellow] shard {shard_spec.index}/{shard_spec.count} owns none of the keys")
    capacity = header_capacity(len(plan.keys), generation.num_return_sequences, generation.max_new_tokens)
    rename_mode = probe_rename(output_dir.parent)
    provenance = make_provenance(
        model_path=config.model.model_path,
        tokenizer_path=config.model.effective_tokenizer_path,
        dtype=config.model.dtype,
        tokenizer=tokenizer_state(tokenizer),
    )
    warn_conflicting_prompts(plan, console)
    if shard_spec is not None:
        console.print(
            f"shard {shard_spec.index}/{shard_spec.count} (from {shard_spec.origin}): {len(plan.keys)} of "
            f"{len(plan.samples.unique)} unique samples, publishing {output_dir}"
        )
    console.print(
        f"{len(plan.keys)} unique samples to generate ({plan.samples.duplicates} duplicates skipped), "
        f"max_new_tokens {generation.max_new_tokens}, batch size {config.gen_batch_size}, device {device}"
    )

    seed_everything(config.seed)
    started = time.monotonic()
    model = load_teacher(
        config.model.model_path,
        dtype=config.model.dtype,
        device=device,
        revision=config.model.revision,
        attn_implementation=config.model.attn_implementation,
    )
    console.print(f"teacher loaded in {time.monotonic() - started:.1f}s")
    report_phase("model_loaded")

    prompts = []
    for key in plan.keys:
        ids = plan.samples.by_key(key).input_ids
        if ids is None:  # build_samples tokenizes whenever a tokenizer is given
            raise GenerationError(f"Sample {key} has no prompt token ids.")
        prompts.append((key, ids))

    tokens = 0
    with ArtifactBuild(output_dir, provenance=provenance, header_capacity=capacity, rename_mode=rename_mode) as build:
        progress = make_progress(len(prompts))
        try:
            for entry in generate_entries(
                model, tokenizer, generation, prompts, batch_size=config.gen_batch_size, progress=progress
            ):
                build.writer.add(
                    entry.key,
                    [seq.numpy().tobytes() for seq in entry.sequences],
                    entry.texts,
                    entry.finish_reasons,
                )
                tokens += entry.num_tokens
        finally:
            progress.close()
        resolved = resolved_config(
            plan,
            generation=generation,
            tokenizer=tokenizer,
            model=model,
            rename_mode=rename_mode,
            batch_policy=batching_policy(config.gen_batch_size),
        )
        summary = {
            "duplicates": plan.samples.duplicates,
            "data_configs": [
                {"index": s.index, "samples": s.samples, "unique": s.unique} for s in plan.samples.summaries
            ],
            "shard": None if shard_spec is None else shard_spec.summary(plan.run_digest),
        }
        build.writer.finalize(resolved_config=resolved, summary=summary)
        mode = build.publish()
    elapsed = time.monotonic() - started
    console.print(f"published {output_dir} ({len(prompts)} entries, {tokens} tokens, {elapsed:.1f}s, rename: {mode})")
    print(output_dir, file=sys.stdout)
    return output_dir
