"""Every check a run makes before the teacher's weights load: the one code path of ``generate`` and ``--dry-run``.

:func:`preflight` runs the checks in two phases and collects every problem (one :class:`gencache.core.errors.Problem`
each) into the dry run's report, skipping only what depends on a check that failed:

1. **The config and the data files** (:mod:`gencache.run.input_checks`; no torch, transformers or datasets):
   paths that must be valid UTF-8, the output location (absent, a name no temporary directory could have, lengths
   the file system takes, a writable parent, rename support), where the model and tokenizer are (a local directory
   whose JSON files all parse, or a hub id, quickly), each data config on its own (its source read, its columns,
   rows and sample count, its prompts when the template needs no tokenizer, its keys), then the ``--shards`` count
   against the unique keys, ``--show-prompt``'s index against the samples, the device as far as it is known without
   torch (a GPU driver on the machine for a CUDA device, accelerate for ``auto``) and the engine's package.
2. **The teacher** (:mod:`gencache.run.teacher_checks`, only when phase 1 found nothing: its checks import torch
   and transformers, and an input mistake should be reported in about a second): the device as torch sees it, the
   tokenizer, the effective generation config, the engine's refusals, the teacher's config, attention
   implementation, weight files and vocabulary, the samples tokenized, the context length, the prompt ids, the
   continuous engine's paged-cache budget and the header budget. It assembles the run's complete inputs.

Nothing is printed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gencache.run import check_kinds as kinds
from gencache.run.findings import Preflight, Runner
from gencache.run.input_checks import InputChecks, InputFacts

if TYPE_CHECKING:
    from gencache.config import CacheConfig, DataConfig
    from gencache.run.sharding import ShardSpec, Target


def preflight(
    config: CacheConfig,
    targets: Sequence[Target],
    shard: ShardSpec | None,
    env: Mapping[str, str] | None,
    show_prompt: int | None = None,
) -> Preflight:
    """Run every model-free check (see the module docstring) and return the report: every problem in
    :attr:`Preflight.problems`, the run's complete inputs in :attr:`Preflight.inputs` when there is none.

    ``targets`` are the artifacts the run publishes (one, or one per shard still to generate); once the samples
    are built, :attr:`Preflight.targets` holds them with the keys each publishes (selected here, once). ``shard``
    is the one shard this process generates, or with ``--shards N`` any of them (its count is checked against the
    unique keys). ``show_prompt`` is the sample ``--show-prompt`` asks for, checked against the samples in phase 1.
    """
    from gencache.data.sources import shared_tables
    from gencache.run.teacher_checks import TeacherChecks

    result = Preflight(config=config, targets=list(targets))
    run = Runner(result)
    with shared_tables():  # phase 2 builds the samples again (tokenized) from the tables phase 1 read
        inputs = InputChecks(run, list(enumerate(config.data_configs)), shard, config)
        rename_mode, keys = inputs.run()
        device = inputs.machine(env, show_prompt, keys)
        if result.problems or device is None:
            why = "not checked: the checks above found problems (the teacher's checks run once they are fixed)"
            for kind in kinds.TEACHER_CHECKS:
                run.skip(kind, why)
            result.not_computed.append(
                "the teacher's checks, prompt token counts, the context-length check and the header budget (the "
                "config or data checks found problems)"
            )
            return result
        result.inputs = TeacherChecks(run, InputFacts(config, shard, device, rename_mode, keys)).run()
    return result


def check_inputs_alone(
    data_configs: Sequence[tuple[int, DataConfig]], targets: Sequence[Target], shard: ShardSpec | None
) -> Preflight:
    """Phase 1 for an invalid config: the data configs and the output location that validated on their own."""
    from gencache.data.sources import shared_tables

    result = Preflight(config=None, targets=list(targets))
    with shared_tables():
        InputChecks(Runner(result), data_configs, shard).run()
    return result
