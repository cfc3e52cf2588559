"""What the examples share: gencache's tiny demo teacher, a cache of its answers made with ``gencache.generate``,
and a smaller student built from the teacher's config. Public gencache pieces only; runs offline on CPU.

The teacher is a random-weight Qwen3-style model (``gencache demo`` builds the same one); its answers over the
sample data bundled with gencache are cached once, and every example reuses them from ``workdir``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import gencache  # noqa: E402
from gencache.cli.demo import demo_config  # noqa: E402
from gencache.generation.tiny import build_tiny_teacher  # noqa: E402


@dataclass(frozen=True)
class Setup:
    """The teacher directory (model and tokenizer), the generation config and the published cache."""

    teacher_dir: Path
    config_path: Path
    artifact: Path


def prepare(workdir: Path) -> Setup:
    """Build the tiny teacher and generate its cache in ``workdir``, or reuse them when they are there."""
    workdir.mkdir(parents=True, exist_ok=True)
    teacher_dir = workdir / "tiny-teacher"
    if not (teacher_dir / "config.json").exists():
        build_tiny_teacher(teacher_dir)
    config_path = workdir / "distil-config.json"
    if not config_path.exists():
        config_path.write_text(json.dumps(demo_config(teacher_dir, workdir / "cache"), indent=2), encoding="utf-8")
    # Generating is idempotent here: an artifact this run already published is verified and returned as it is.
    artifact = gencache.generate(config_path, skip_published=True)
    return Setup(teacher_dir, config_path, artifact)


def load_teacher(setup: Setup) -> tuple[Any, Any]:
    """The teacher's tokenizer (prepared as for generation) and the teacher itself, in float32 as it generated."""
    import torch
    import transformers

    tokenizer = gencache.prepare_tokenizer(transformers.AutoTokenizer.from_pretrained(str(setup.teacher_dir)))
    teacher = transformers.AutoModelForCausalLM.from_pretrained(str(setup.teacher_dir), dtype=torch.float32)
    return tokenizer, teacher.eval()


def distillation_data(setup: Setup, tokenizer: Any) -> Any:
    """The cached answers paired with their prompts (prompts cut from the left to fit 1,024 tokens)."""
    from gencache.training import DistillationDataset

    return DistillationDataset(
        setup.artifact,
        tokenizer,
        config=setup.config_path,
        model_path=str(setup.teacher_dir),
        tokenizer_path=str(setup.teacher_dir),
        dtype="float32",
        max_length=1024,
        truncation="left",
    )


def make_student(teacher: Any, seed: int = 0) -> Any:
    """A randomly initialised Qwen3 with the teacher's vocabulary, one layer and half the hidden size."""
    import torch
    import transformers

    config = teacher.config
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(
        transformers.Qwen3Config(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size // 2,
            intermediate_size=config.hidden_size,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=config.hidden_size // 4,
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=True,
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
        )
    )
