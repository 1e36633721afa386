"""Where a long text run may be cut without changing its IDs, and the cutting: a 50 MB message is
encoded in pieces, in time and memory linear in the text (the encoder's engines encode each piece).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from tokenizers import Tokenizer

# Very long text runs (a 50 MB message) are encoded in pieces of about this many characters: one
# tokenizers call on 50 MB took 111 s and 9.4 GB (its normalised string keeps per-byte
# alignments), pieces take time and memory linear in the text, and run in parallel.
_PIECE_CHARS = 1 << 16
# Where a run may be cut without changing its IDs. Two kinds of point, each a place where the
# Qwen pre-tokenizer below (regex split, then byte-level BPE inside each pre-token) ends one
# pre-token and starts the next whether it sees the whole text, the text before the point alone
# or the text after it alone:
# 1. Right after a "\n" followed by spaces or tabs (or nothing) and then a non-space: whichever
#    alternative takes that "\n" (`\s*[\r\n]+`, or a punctuation run's `[\r\n]*`) ends after
#    the last newline of its whitespace run, which this one is; alone, the text before ends
#    there too. (Lines of code indented by spaces, lines starting with a letter or digit.)
# 2. Between a letter or number and one of _CUT_BEFORE (ASCII space, control and punctuation
#    characters that no added token holds): a letter run (`[\p{L}\p{M}]+` or `\p{L}+`) and a
#    number (`\p{N}`, one character) end before any of them, and a contraction ends on its
#    letter. (Words separated by spaces, minified JSON, one long line.)
# Either way no alternative needs to look past the point to end there: the regex has no
# look-behind, and its one look-ahead (`\s+(?!\S)`) only belongs to whitespace runs that end
# before a non-space. NFC never composes or reorders across a "\n" or before an ASCII character;
# no added token holds "\n" or a _CUT_BEFORE character, so none spans a cut.
# tests/test_encoder_pieces.py checks every character each rule admits, cut against uncut, on
# both Qwen pre-tokenizer patterns.
_CUT_BEFORE = " \t\r\n!\"#$%&'()*+,-.:;=?@[\\]^`{}~"
_SAFE_CUT = re.compile(r"\n(?=[ \t]*[^\s])|(?<=[^\W_])(?=[" + re.escape(_CUT_BEFORE) + "])")
# The pre-tokenizers (Split regex + ByteLevel) for which that argument is made: Qwen 3.5-3.8 and
# Qwen 2-3. Any other vocabulary is encoded uncut.
_CUTTABLE_PATTERNS = frozenset(
    {
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
        r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
        r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    }
)


def _cuttable(tokenizer: Tokenizer, added: Iterable[str]) -> bool:
    """Whether ``_SAFE_CUT`` provably keeps this vocabulary's IDs (see above)."""
    try:
        normalizer = (
            None
            if tokenizer.normalizer is None
            else json.loads(tokenizer.normalizer.__getstate__())
        )
        pre = json.loads(tokenizer.pre_tokenizer.__getstate__())
    except Exception:
        return False
    if normalizer not in (None, {"type": "NFC"}) or any(
        char in token for token in added for char in _CUT_BEFORE
    ):
        return False
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not isinstance(steps, list) or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split"
        and split.get("pattern", {}).get("Regex") in _CUTTABLE_PATTERNS
        and split.get("behavior") == "Isolated"
        and split.get("invert") is False
        and byte_level.get("type") == "ByteLevel"
        and byte_level.get("use_regex") is False
        and byte_level.get("add_prefix_space") is False
    )


def _pieces(text: str) -> list[str]:
    """``text`` cut at safe points into pieces of at least ``_PIECE_CHARS`` characters (the last
    may be shorter; text with no safe point stays whole)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > 2 * _PIECE_CHARS:
        cut = _SAFE_CUT.search(text, start + _PIECE_CHARS)
        if cut is None:
            break
        pieces.append(text[start : cut.end()])
        start = cut.end()  # the match is empty (rule 2) or the "\n" (rule 1): cut after it
    pieces.append(text[start:])
    return pieces


def _cut_length(length: int) -> bool:
    """Whether ``_pieces`` cuts a text of this many characters (a shorter one is encoded whole,
    without the search for cut points)."""
    return length > 2 * _PIECE_CHARS
