"""A byte-level tokenizer built locally (no hub): one token per byte plus special tokens.

Token id b (0..255) is the byte b, so reward functions and tests can reason about ids and bytes
interchangeably. It is a `tokenizers` BPE model with no merges over GPT-2's byte-to-unicode
alphabet (so every byte string round-trips), wrapped in `PreTrainedTokenizerFast` and saved with
`save_pretrained`, so `AutoTokenizer.from_pretrained(folder)` loads it like any real tokenizer.

`load_tokenizer` lives here, not with the model code, because a pipeline's driver process needs
the tokenizer and not the model: importing transformers' modeling code costs seconds of CPU in
each of them at every run's start.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

NUM_BYTES = 256
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
EOS_TOKEN_ID = NUM_BYTES
PAD_TOKEN_ID = NUM_BYTES + 1
VOCAB_SIZE = NUM_BYTES + 2


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable unicode characters.

    The ByteLevel pre-tokenizer turns raw bytes into exactly these characters, so the BPE vocab
    must be keyed by them.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    next_code = 0
    for b in range(NUM_BYTES):
        if b not in mapping:
            # Unprintable bytes go to code points past the byte range, in byte order.
            mapping[b] = chr(NUM_BYTES + next_code)
            next_code += 1
    return mapping


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """The byte tokenizer: ids 0..255 are bytes, 256 is end-of-text, 257 is padding."""
    vocab = {char: b for b, char in byte_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # use_regex=False: no word splitting, every byte becomes one token whatever the text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([EOS_TOKEN, PAD_TOKEN])
    # Decoder-only batched generation needs left padding (saved into the tokenizer config).
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers' tokenizer class is untyped
        tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, padding_side="left"
    )


def save_byte_tokenizer(folder: str | Path) -> None:
    """Build the byte tokenizer and save it (tokenizer.json + config) into `folder`."""
    build_byte_tokenizer().save_pretrained(str(folder))


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer saved with a model folder (the byte tokenizer or a real model's)."""
    return AutoTokenizer.from_pretrained(str(folder))
