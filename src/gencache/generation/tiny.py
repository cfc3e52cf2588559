"""A tiny, offline, deterministic Qwen3-style teacher for tests, benchmarks and ``gencache demo``: random Qwen3
weights, a byte-level BPE tokenizer trained on a built-in corpus, a Qwen3-like chat template (an empty think block
unless ``enable_thinking``) and a generation config shaped like Qwen3's (an EOS list, sampling switched on, so
gencache's "greedy unless asked" rule is exercised). Nothing is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from gencache.generation.teacher import hf, no_loading_bar

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TINY_MAX_NEW_TOKENS = 16
#: A head size vLLM's CPU attention supports (it takes 32, 64, 80, ... but not the default 16).
TINY_CPU_ATTENTION_HEAD_DIM = 32

# A Qwen3-like chat template: optional system message, role blocks, and with ``add_generation_prompt`` the assistant
# header followed by an empty think block unless thinking is enabled (Qwen3-8B's behaviour).
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_FIRST_NAMES = (
    "Alice",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kamala",
    "Lars",
    "Maya",
    "Nikolai",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Samir",
    "Tove",
)
_SURNAMES = ("Hartley", "Moreau", "Okafor", "Lindqvist", "Tanaka", "Ferreira", "Novak", "Castillo", "Brennan", "Petrov")
_CITIES = ("Lisbon", "Kyoto", "Toronto", "Nairobi", "Oslo", "Valparaiso", "Krakow", "Melbourne", "Tunis", "Seattle")
_FIELDS = ("physics", "history", "chemistry", "linguistics", "economics", "music", "geology", "medicine")
_COMPANIES = ("Northwind Labs", "Bluewater Systems", "Aurora Press", "Granite Works", "Helix Energy")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_PASSAGES = (
    "The river flows north through the valley before it reaches the old stone bridge near the harbour.",
    "Question: Which city hosted the first exhibition? Answer: The first exhibition was held in Lisbon.",
    "A needle is hidden in a haystack of unrelated sentences; the special magic number is 7341.",
    "Read the documents carefully and respond with the answer only.",
    "The committee met on Tuesday, reviewed 12 proposals, and approved 3 of them after a long debate.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "In 1969 the mission landed on the Moon, and millions watched the broadcast around the world.",
    "What is the capital of Norway? The capital of Norway is Oslo.",
    "Let's think step by step: first find the author, then find the year the book was published.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "Prices rose by 4.5% in May, while wages grew by only 2.1% over the same period.",
    "Ünïcödé tëxt, emoji 🙂 and CJK 漢字 appear rarely but must round-trip through the byte-level tokenizer.",
    "Distillation trains a small student model to imitate the answers of a larger teacher model.",
    "The orchestra performed a symphony by a forgotten composer, and the audience applauded for minutes.",
    "Glaciers carved deep fjords along the coast during the last ice age, leaving steep granite walls.",
    "The treaty was signed in Vienna after months of negotiation between seven delegations.",
    "Vaccines train the immune system to recognise a pathogen without causing the disease itself.",
    "Her novel, published in 1987, follows three generations of a fishing family on a remote island.",
    "Supply chains depend on shipping routes, warehouses, customs offices and reliable forecasts.",
    "The volcano erupted twice in one decade, covering nearby villages with a thick layer of ash.",
    "Mathematicians proved the conjecture using a clever argument about prime numbers and symmetry.",
    "The library keeps manuscripts, maps, photographs and letters written by famous explorers.",
)


def builtin_corpus() -> Iterator[str]:
    """The deterministic training text of the tiny tokenizer: biography-like sentences, QA lines and passages."""
    for i, first in enumerate(_FIRST_NAMES):
        last = _SURNAMES[i % len(_SURNAMES)]
        city = _CITIES[(3 * i) % len(_CITIES)]
        field = _FIELDS[i % len(_FIELDS)]
        pronoun = "She" if i % 2 == 0 else "He"
        yield (
            f"{first} {last} was born on {_MONTHS[(5 * i) % len(_MONTHS)]} {1 + (7 * i) % 28}, {1940 + 3 * i} in "
            f"{city}. {pronoun} studied {field} at the University of {_CITIES[(i + 4) % len(_CITIES)]}. "
            f"{pronoun} worked for {_COMPANIES[i % len(_COMPANIES)]} and lived in {city} for {10 + i} years."
        )
        yield f"Question: Where was {first} {last} born? Answer: {city}."
        yield f"Question: What did {first} {last} study? Answer: {field}."
    yield from _PASSAGES
    for n in range(0, 200, 7):
        yield f"{n} + {n + 1} = {2 * n + 1}; {n} * 2 = {2 * n}."


def build_tiny_teacher(directory: str | os.PathLike[str], *, seed: int = 0, head_dim: int = 16) -> Path:
    """Write a tiny random-weight Qwen3 teacher with its tokenizer into ``directory`` and return its path; the same
    arguments give byte-identical files. vLLM's CPU backend needs ``head_dim`` :data:`TINY_CPU_ATTENTION_HEAD_DIM`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    out = Path(directory)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1022,  # 1024 with the two think tokens
        min_frequency=1,
        special_tokens=[ENDOFTEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(builtin_corpus(), trainer=trainer)
    tokenizer = hf().PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    tokenizer.add_tokens(["<think>", "</think>"], special_tokens=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))

    endoftext_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = hf().Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=4096,
        # larger than Qwen3's 0.02 so greedy top-1/top-2 logit margins of the random model are far above float32 noise
        initializer_range=0.08,
        tie_word_embeddings=False,
        bos_token_id=endoftext_id,
        eos_token_id=im_end_id,
        pad_token_id=endoftext_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = hf().Qwen3ForCausalLM(config)
    model.generation_config = hf().GenerationConfig(  # the sampling parameters Qwen3 ships
        bos_token_id=endoftext_id,
        eos_token_id=[im_end_id, endoftext_id],
        pad_token_id=endoftext_id,
        do_sample=True,
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        max_new_tokens=TINY_MAX_NEW_TOKENS,
    )
    with no_loading_bar():  # the demo's output stays readable; the process's bars are left as they were
        model.save_pretrained(str(out))
    return out
