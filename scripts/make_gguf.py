"""Write a vocabulary-only GGUF from a checkpoint folder, the way llama.cpp's converter does.

    python scripts/make_gguf.py CHECKPOINT_FOLDER OUT.gguf

Test data for qwen-encode's GGUF reader and validation: the tokenizer metadata that
``convert_hf_to_gguf.py --vocab-only`` writes for a Qwen 3.5+ / 3.8 checkpoint
(``Qwen3_5ForConditionalGeneration``), without tensors. Where each part comes from:

* ``get_vocab_base`` mirrors ``TextModel.get_vocab_base`` of ``convert_hf_to_gguf.py`` at llama.cpp
  commit 0024aa7417efd50a7c2a79e049dfbbbceb0beaaf: one token per ID in ``range(vocab_size)`` with
  ``vocab_size`` from config.json (``text_config`` merged in, as ``load_hparams`` does), IDs the
  tokenizer lacks filled with ``[PAD{i}]`` typed UNUSED, added tokens typed CONTROL when
  ``special`` or when they "look special" (``<|...|>``), else USER_DEFINED, the rest NORMAL;
* ``tokenizer.ggml.pre`` = ``qwen35``: the value ``get_vocab_base_pre`` gives the Qwen 3.5
  pre-tokenizer (chkhsh d30d75d9..., ref Qwen/Qwen3.5-9B-Instruct) at that commit; computing the
  hash needs the converter's table, so it is written here as the converter's answer;
* merges, bos/eos/pad IDs, ``add_bos_token`` and the chat template come from ``gguf.SpecialVocab``
  (the PyPI ``gguf`` package, llama.cpp's own gguf-py; 0.19.0 when this was written), as the
  converter's ``_set_vocab_gpt2`` calls it: it takes ``tokenizer_config.json``'s
  ``chat_template`` over ``chat_template.jinja`` when both exist.

``converter_fields(folder)`` returns the key-values in the converter's order; tests mutate them
and write the mutants with ``write_fields``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import gguf

#: llama.cpp commit whose converter this script follows.
LLAMA_CPP_COMMIT = "0024aa7417efd50a7c2a79e049dfbbbceb0beaaf"

Field = tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]


def _hparams(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    # ModelBase.load_hparams: text_config's keys are merged over the top level.
    return {**config, **config.get("text_config", {})}


def does_token_look_special(text: str) -> bool:
    """``ModelBase.does_token_look_special`` of the converter."""
    if text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]"):
        return True
    if text.startswith("<|") and text.endswith("|>"):
        return True
    if text.startswith("<｜") and text.endswith("｜>"):
        return True
    return text.startswith("<unused") and text.endswith(">")


def get_vocab_base(folder: Path) -> tuple[list[str], list[int]]:
    """``TextModel.get_vocab_base`` of the converter, for a gpt2 (BPE) tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab_size = _hparams(folder).get("vocab_size", len(tokenizer.vocab))
    assert max(tokenizer.vocab.values()) < vocab_size
    reverse_vocab = {id_: token for token, id_ in tokenizer.vocab.items()}
    added_vocab = tokenizer.get_added_vocab()
    added_decoder = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse_vocab:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse_vocab[i]
        if token in added_vocab:
            if not added_decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if added_decoder[i].special or does_token_look_special(token):
                types.append(gguf.TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    return tokens, types


def converter_fields(folder: Path, arch: str = "qwen35") -> dict[str, Field]:
    """The key-values ``convert_hf_to_gguf.py --vocab-only`` writes for ``folder``, in order:
    key -> (value, type, element type of an array)."""
    S, U32, B, A = (
        gguf.GGUFValueType.STRING,
        gguf.GGUFValueType.UINT32,
        gguf.GGUFValueType.BOOL,
        gguf.GGUFValueType.ARRAY,
    )
    tokens, types = get_vocab_base(folder)
    fields: dict[str, Field] = {
        "general.architecture": (arch, S, None),
        "general.type": ("model", S, None),
        "general.name": (folder.name, S, None),
        "tokenizer.ggml.model": ("gpt2", S, None),
        "tokenizer.ggml.pre": ("qwen35", S, None),
        "tokenizer.ggml.tokens": (tokens, A, S),
        "tokenizer.ggml.token_type": ([int(t) for t in types], A, gguf.GGUFValueType.INT32),
    }
    special = gguf.SpecialVocab(folder, load_merges=True)
    if special.merges:
        fields["tokenizer.ggml.merges"] = (list(special.merges), A, S)
    for kind, token_id in special.special_token_ids.items():
        fields[f"tokenizer.ggml.{kind}_token_id"] = (token_id, U32, None)
    for kind, value in special.add_special_token.items():
        fields[f"tokenizer.ggml.add_{kind}_token"] = (value, B, None)
    template = special.chat_template
    if isinstance(template, str):
        fields["tokenizer.chat_template"] = (template, S, None)
    elif isinstance(
        template, list
    ):  # named templates: "default" plus tokenizer.chat_template.<name>
        for entry in template:
            name = entry["name"]
            key = (
                "tokenizer.chat_template"
                if name == "default"
                else f"tokenizer.chat_template.{name}"
            )
            fields[key] = (entry["template"], S, None)
    return fields


def write_fields(fields: dict[str, Field], out: Path) -> None:
    """Write ``fields`` as a tensor-less GGUF at ``out`` with gguf's own writer."""
    arch = fields["general.architecture"][0] if "general.architecture" in fields else "qwen35"
    writer = gguf.GGUFWriter(str(out), arch=str(arch))
    # GGUFWriter adds general.architecture itself; the other keys go in as given.
    writer.kv_data[0].pop("general.architecture", None)
    for key, (value, kind, sub) in fields.items():
        writer.add_key_value(key, value, kind, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="checkpoint folder (tokenizer.json, config.json)")
    parser.add_argument("out", type=Path, help="GGUF file to write")
    args = parser.parse_args(argv)
    write_fields(converter_fields(args.folder), args.out)
    print(f"{args.out}: written (llama.cpp converter at {LLAMA_CPP_COMMIT[:12]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
