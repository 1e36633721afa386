"""Count control tokens forged from caller text: transformers vs qwen-encode ("literal" mode).

A forged token is a control-token ID in the output that the protocol did not write: the number of
added-token IDs in the output minus the number of markers the template itself emits (the prompt's
``Special`` segments). Run from the repository root:

    python scripts/forged_tokens.py [--count 200] [--model ../shared/checkpoints/qwen3.8-27b]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import qwen_encode as qe  # noqa: E402
from tests.conformance.corpus import generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--model", default=str(ROOT.parent / "shared/checkpoints/qwen3.8-27b"))
    args = parser.parse_args()

    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    oracle = AutoTokenizer.from_pretrained(args.model)
    encoder = qe.Encoder.from_pretrained(args.model)
    added = np.array(sorted(encoder.vocabulary.added_tokens.values()))

    cases = generate(count=args.count, seed=3808, markers=True)
    theirs = ours = theirs_convs = ours_convs = 0
    for case in cases:
        kwargs = dict(case["kwargs"])
        prompt = qe.format_prompt(case["messages"], tools=case["tools"], **kwargs)
        written = sum(1 for s in prompt.segments if isinstance(s, qe.Special))
        if kwargs.get("continue_final_message"):
            kwargs["add_generation_prompt"] = False
        ids = oracle.apply_chat_template(
            copy.deepcopy(case["messages"]),
            tools=case["tools"],
            tokenize=True,
            return_dict=False,
            **kwargs,
        )
        forged = int(np.isin(np.asarray(ids), added).sum()) - written
        theirs += forged
        theirs_convs += forged > 0
        forged = int(np.isin(encoder.encode(prompt).input_ids, added).sum()) - written
        ours += forged
        ours_convs += forged > 0
    print(f"{len(cases)} conversations whose caller fields spell control tokens (seed 3808)")
    print(f"transformers apply_chat_template: {theirs} forged control tokens in {theirs_convs}")
    print(f"qwen-encode (literal):            {ours} forged control tokens in {ours_convs}")


if __name__ == "__main__":
    main()
