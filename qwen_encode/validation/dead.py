"""Dead tokens: a vocabulary entry whose text does not encode back to it can never be produced
from text, so its embedding is never trained (the check of "Fishing for Magikarp", Land & Bartolo
2024)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import numpy as np
import tokenizers

from ..checkpoint import derived_cache_path, file_sha256
from ..files import write_atomic

# --------------------------------------------------------------------------------------------
# Dead tokens


def _byte_table() -> dict[int, int]:
    """GPT-2's byte-level alphabet, inverted, as a ``str.translate`` table: the character
    ByteLevel writes for each byte (printable Latin-1 stands for itself, the other bytes map to
    U+0100 onwards in order) back to the code point of that byte, so that ``.encode("latin-1")``
    yields the token's bytes (one C call per token, not a Python loop per character)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {byte: byte for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in table:
            table[256 + shifted] = byte
            # A Latin-1 character ByteLevel never writes: mapped out of Latin-1, so that the
            # encode fails as it does for any other character outside the alphabet.
            table[byte] = _NOT_A_BYTE
            shifted += 1
    return table


_NOT_A_BYTE: Final = 0xFFFF
_BYTE_TABLE: Final = _byte_table()


DeadKind: TypeAlias = Literal["unreachable", "pre_tokenizer", "partial_utf8", "nfc", "added"]
DEAD_KINDS: Final[tuple[DeadKind, ...]] = (
    "unreachable",
    "pre_tokenizer",
    "partial_utf8",
    "nfc",
    "added",
)
_DEAD_MEANING: Final[Mapping[DeadKind, str]] = {
    "unreachable": "unreachable by the merges (BPE builds other tokens from their text)",
    "pre_tokenizer": "split by the pre-tokenizer (BPE never sees their text whole)",
    "partial_utf8": "partial UTF-8 byte sequences (no text decodes to them alone)",
    "nfc": "changed by the NFC normalizer (their text is normalized to something else)",
    "added": "added tokens that their own text does not produce",
}


@dataclass(frozen=True)
class DeadToken:
    id: int
    token: str  # as the vocabulary spells it (byte-level characters)
    text: str | None  # the decoded text, None for partial UTF-8
    encodes_as: tuple[int, ...] = ()

    @property
    def raw(self) -> bytes:
        """The token's bytes (for an added token, its text in UTF-8)."""
        if self.text is not None:
            return self.text.encode("utf-8")
        return self.token.translate(_BYTE_TABLE).encode("latin-1")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "text": self.text,
            "bytes": self.raw.hex(),
            "encodes_as": list(self.encodes_as),
        }


@dataclass(frozen=True)
class DeadTokens:
    """Every vocabulary entry whose decoded string does not encode back to that single token,
    by kind (``DEAD_KINDS``); ``checked`` is how many entries were looked at."""

    checked: int
    unreachable: tuple[DeadToken, ...]
    pre_tokenizer: tuple[DeadToken, ...]
    partial_utf8: tuple[DeadToken, ...]
    nfc: tuple[DeadToken, ...]
    added: tuple[DeadToken, ...]
    note: str | None = None

    def of(self, kind: DeadKind) -> tuple[DeadToken, ...]:
        return tuple(getattr(self, kind))

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "note": self.note,
            **{
                kind: {
                    "meaning": _DEAD_MEANING[kind],
                    "count": len(self.of(kind)),
                    "tokens": [t.to_dict() for t in self.of(kind)],
                }
                for kind in DEAD_KINDS
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeadTokens:
        """The inverse of ``to_dict``; ``ValueError`` for anything ``to_dict`` does not write."""

        def token(entry: Mapping[str, Any]) -> DeadToken:
            made = DeadToken(entry["id"], entry["token"], entry["text"], tuple(entry["encodes_as"]))
            if not isinstance(made.id, int) or made.to_dict() != entry:
                raise ValueError(f"not a dead-token entry: {entry!r:.200}")
            return made

        try:
            kinds = {kind: tuple(token(t) for t in data[kind]["tokens"]) for kind in DEAD_KINDS}
            made = cls(checked=data["checked"], note=data["note"], **kinds)
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a dead-token report: {error}") from error
        if not isinstance(made.checked, int) or made.to_dict() != data:
            raise ValueError("not a dead-token report: it does not read back as written")
        return made


#: Bump when the verdicts of ``dead_tokens`` or the fields of ``DeadTokens`` change: a result
#: cached by older code is then never read.
_DEAD_CACHE_VERSION: Final = 1


def cached_dead_tokens(tokenizer: tokenizers.Tokenizer, tokenizer_json: Path) -> DeadTokens:
    """``dead_tokens``, kept by the sha256 of tokenizer.json, the tokenizers version and
    ``_DEAD_CACHE_VERSION`` (as the engine proofs are): validating several fine-tunes of one base
    checks their shared vocabulary once. A cache that cannot be read or written only means the
    check runs."""
    try:
        digest = file_sha256(tokenizer_json)
    except OSError:
        return dead_tokens(tokenizer)
    name = f"{digest}-tokenizers-{tokenizers.__version__}-v{_DEAD_CACHE_VERSION}.json"
    path = derived_cache_path("dead-tokens", name)
    try:
        return DeadTokens.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    dead = dead_tokens(tokenizer)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Whole or absent: a process sharing the cache never reads half a file.
        write_atomic(path, json.dumps(dead.to_dict(), ensure_ascii=False).encode("utf-8"))
    except OSError:
        pass
    return dead


#: Texts per encode call of the dead-token check. Joined, the 247k texts of the Qwen 3.8
#: vocabulary encode in 0.85 s (1.6 s of CPU) where one Encoding per text took 2.4 s (3.6 s of
#: CPU); far longer texts get slower per character inside tokenizers (one text of all: 5.3 s).
_CHUNK: Final = 4096


def _separator(tokenizer: tokenizers.Tokenizer) -> tuple[str, int] | None:
    """An added token that cuts a joined text into pieces each encoded exactly as alone, or None.

    tokenizers splits a text at its unnormalized added tokens before normalizing and
    pre-tokenizing it, so the pieces between two separators go through the pipeline one by one.
    That holds when the separator eats no neighbouring whitespace (lstrip, rstrip, single_word
    all false), is matched in the raw text (normalized false), and no added-token match can
    span a boundary: no unnormalized added token may end with a proper prefix of the separator
    (its match would start in the text before and take the separator's first characters) or
    contain it (a longer match at the separator's own start wins)."""
    tokens = tokenizer.get_added_tokens_decoder()
    raw = [token.content for token in tokens.values() if not token.normalized]
    for token_id, token in sorted(tokens.items()):
        content = token.content
        if not content or token.normalized or token.lstrip or token.rstrip or token.single_word:
            continue
        heads = tuple(content[:k] for k in range(1, len(content)))
        if any(
            (other != content and content in other) or (heads and other.endswith(heads))
            for other in raw
        ):
            continue
        return content, token_id
    return None


def _encode_back(
    tokenizer: tokenizers.Tokenizer, candidates: Sequence[tuple[int, str]]
) -> list[tuple[int, tuple[int, ...]]]:
    """Each (ID, text) whose text does not encode to exactly [ID], with what it encodes to."""
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        # Both would cut or pad the joined texts; a copy leaves the caller's tokenizer alone.
        tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_truncation()
        tokenizer.no_padding()
    # encode_batch_fast (tokenizers >= 0.20) skips the offsets, which this check never reads.
    encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    chunks = [candidates[i : i + _CHUNK] for i in range(0, len(candidates), _CHUNK)]
    separator = _separator(tokenizer)
    failed: list[tuple[int, tuple[int, ...]]] = []
    alone: list[tuple[int, str]] = []
    if separator is None:
        alone = list(candidates)
    else:
        text, sid = separator
        # One batch: tokenizers runs the chunks on every core.
        joined = encode_batch(
            [text.join(t for _, t in c) for c in chunks], add_special_tokens=False
        )
        for chunk, encoding in zip(chunks, joined, strict=True):
            flat = np.asarray(encoding.ids, dtype=np.int64)
            cuts = np.flatnonzero(flat == sid)
            if len(cuts) != len(chunk) - 1 or not len(flat):
                # A text holding the separator's own string (it splits there alone too) or a
                # tokenizer set to encode special tokens as text: these go one by one.
                alone += chunk
                continue
            starts = np.concatenate(([0], cuts + 1))
            ends = np.append(cuts, len(flat))
            expected = np.fromiter((token_id for token_id, _ in chunk), np.int64, len(chunk))
            fine = ((ends - starts) == 1) & (flat[np.minimum(starts, len(flat) - 1)] == expected)
            failed += [
                (chunk[k][0], tuple(flat[starts[k] : ends[k]].tolist()))
                for k in np.flatnonzero(~fine).tolist()
            ]
    if alone:
        encodings = encode_batch([t for _, t in alone], add_special_tokens=False)
        failed += [
            (token_id, tuple(encoding.ids))
            for (token_id, _), encoding in zip(alone, encodings, strict=True)
            if encoding.ids != [token_id]
        ]
    return failed


def _base_vocabulary(tokenizer: tokenizers.Tokenizer) -> list[tuple[int, str]]:
    """(ID, token) of the model's vocabulary. IDs 0..n-1 are read one by one (0.19 s for 248k
    tokens, where ``get_vocab`` builds a dict in 0.32 s); other numberings through ``get_vocab``."""
    model = tokenizer.model
    size = tokenizer.get_vocab_size(with_added_tokens=False)
    tokens = [model.id_to_token(token_id) for token_id in range(size)]
    known = [token for token in tokens if token is not None]
    if len(known) < size or model.id_to_token(size) is not None:
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        return [(token_id, token) for token, token_id in vocab.items()]
    return list(enumerate(known))


def dead_tokens(tokenizer: tokenizers.Tokenizer) -> DeadTokens:
    """The encode-back check on every entry: the texts joined by an added token into a few
    thousand-token texts, encoded in one batch (``_separator`` says why that equals encoding each
    alone); without a usable added token, one ``encode_batch`` of the single texts."""
    base = _base_vocabulary(tokenizer)
    added = {
        token_id: token.content for token_id, token in tokenizer.get_added_tokens_decoder().items()
    }
    partial, nfc = [], []
    candidates: list[tuple[int, str]] = []
    spelled: dict[int, str] = {}
    foreign = 0
    for token_id, token in base:
        if token_id in added:
            continue
        try:
            raw = token.translate(_BYTE_TABLE).encode("latin-1")
        except UnicodeEncodeError:
            foreign += 1  # not a byte-level entry: nothing to decode it with
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            partial.append(DeadToken(token_id, token, None))
            continue
        if unicodedata.is_normalized("NFC", text):
            candidates.append((token_id, text))
            spelled[token_id] = token
        else:
            normalized = unicodedata.normalize("NFC", text)
            nfc.append(
                DeadToken(
                    token_id,
                    token,
                    text,
                    tuple(tokenizer.encode(normalized, add_special_tokens=False).ids),
                )
            )
    texts = dict(candidates)
    unreachable: list[DeadToken] = []
    split: list[DeadToken] = []
    for token_id, ids in _encode_back(tokenizer, candidates):
        text = texts[token_id]
        dead = DeadToken(token_id, spelled[token_id], text, ids)
        # Only for the few that failed: is it the pre-tokenizer (digits one by one, a letter
        # run cut from punctuation) rather than a missing merge?
        pieces = tokenizer.pre_tokenizer.pre_tokenize_str(text) if tokenizer.pre_tokenizer else []
        (split if len(pieces) > 1 else unreachable).append(dead)
    added_dead = []
    for token_id, content in sorted(added.items()):
        encoded = tokenizer.encode(content, add_special_tokens=False).ids
        if encoded != [token_id]:
            added_dead.append(DeadToken(token_id, content, content, tuple(encoded)))
    note = f"{foreign} entries are not byte-level and were not checked" if foreign else None
    return DeadTokens(
        checked=len(base) + len(added) - foreign,
        unreachable=tuple(sorted(unreachable, key=lambda t: t.id)),
        pre_tokenizer=tuple(sorted(split, key=lambda t: t.id)),
        partial_utf8=tuple(sorted(partial, key=lambda t: t.id)),
        nfc=tuple(sorted(nfc, key=lambda t: t.id)),
        added=tuple(added_dead),
        note=note,
    )
