"""The expectation model of a GGUF: what llama.cpp's converter writes from the official Qwen 3.8
checkpoint, and what llama.cpp derives when it loads the file (see ``qwen_encode.validation.gguf``
for each rule's use). Constants only, with where each comes from."""

from __future__ import annotations

from typing import Final

from ..gguf_tokenizer import CONTROL, USER_DEFINED

LLAMA_CPP_COMMIT: Final = "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf"
CONVERTER: Final = f"convert_hf_to_gguf.py (llama.cpp {LLAMA_CPP_COMMIT[:10]})"
LOADER: Final = "llama.cpp src/llama-vocab.cpp, llama_vocab::impl::load"

#: Fingerprints of the official Qwen 3.8 vocabulary as the converter writes it (see above).
OFFICIAL_TOKENS_SHA256: Final = "eb6a58cae3f0632671bbc8b7689d048940fcc419f5462db835f6cc4fbab92553"
OFFICIAL_SORTED_TOKENS_SHA256: Final = (
    "3b4e8f0b6a99dbb36ec4fea4a8575505a72a1b77bf9c012b351bd8628ee0d8d4"
)
OFFICIAL_MERGES_SHA256: Final = "4ba698529766c7a2f5052083ea10cdf2485577f5237a332ee291054eb11e3332"
OFFICIAL_MERGE_COUNT: Final = 247_587

ARCHITECTURES: Final = ("qwen35", "qwen35moe")

#: Token texts llama.cpp puts in the end-of-generation set whatever their ID (llama-vocab.cpp).
EOG_TEXTS: Final = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
    }
)
#: The FIM tokens llama.cpp finds by text (pad, repo, file separator) and adds to the same set.
EOG_FIM_TEXTS: Final = frozenset({"<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})


def expected_marker_type(marker: str, special: bool | None = None) -> int:
    """The type the converter gives an added token: CONTROL when ``special`` (the checkpoint's
    flag; None: unknown) or when it looks special (``<|...|>``), else USER_DEFINED."""
    looks_special = marker.startswith("<|") and marker.endswith("|>")
    return CONTROL if special or looks_special else USER_DEFINED


TYPE_MEANING: Final = {
    CONTROL: "atomic only where llama.cpp parses special tokens; left out of the text llama.cpp "
    "returns (detokenized without special tokens)",
    USER_DEFINED: "atomic even in text: llama.cpp matches it in caller text with "
    "parse_special=false, so send token IDs",
}
TEMPLATE_KEY: Final = "tokenizer.chat_template"
