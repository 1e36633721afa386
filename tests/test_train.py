"""A real trainer on our rows: TRL's SFTTrainer, 2 steps on a tiny random Qwen3 model built from a
config here (no download), unpacked and packed (bfd), on rows from ``qwen_encode.data``.

What is checked is read back from the batches the collator built, not assumed: the tokens whose
label is not -100 are exactly the assistant tokens of the row they came from (TRL 1.16 folds an
``assistant_masks`` column into ``labels`` and keeps a ready ``labels`` column as it is), and the
loss is finite. torch and TRL are heavy: these tests skip without them and run in
``scripts/integration_env.sh train``.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qwen_encode as qe

from .conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/integration_env.sh)")
trl = pytest.importorskip("trl", reason="TRL is not installed (scripts/integration_env.sh train)")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from qwen_encode import data  # noqa: E402 - after the skips

TINY = ROOT / "fixtures" / "qwen3.8-tiny"


def conversations() -> list[dict[str, Any]]:
    """Training conversations: reasoning, tool calls and results, several assistant turns."""
    examples = [
        json.loads(line)
        for line in (ROOT / "examples" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    closed = [e for e in examples if e.get("add_generation_prompt") is False]
    made = []
    for i in range(12):
        made.append(
            {
                "messages": [
                    {"role": "system", "content": f"You are assistant number {i}."},
                    {"role": "user", "content": f"What is {i} plus {i}?"},
                    {
                        "role": "assistant",
                        "reasoning_content": f"{i} and {i} make {2 * i}.",
                        "content": f"{2 * i}",
                    },
                    {"role": "user", "content": "And times two?"},
                    {"role": "assistant", "content": f"{4 * i}, since {2 * i} twice is {4 * i}."},
                ],
                "add_generation_prompt": False,
            }
        )
    return [
        {"messages": json.dumps(r["messages"]), "add_generation_prompt": False}
        for r in closed + made
    ]


@pytest.fixture(scope="module")
def encoder() -> qe.Encoder:
    return qe.Encoder.from_pretrained(TINY, engine="tokenizers")


def tiny_model(encoder: qe.Encoder) -> Any:
    config = transformers.Qwen3Config(
        vocab_size=encoder.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=1024,
        pad_token_id=encoder.pad_id,
    )
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(config)


class Recording(trl.SFTTrainer):
    """Keeps every batch the collator built and every loss."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[dict[str, Any]] = []
        self.losses: list[float] = []

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.batches.append(
            {k: v.detach().clone() for k, v in inputs.items() if hasattr(v, "detach")}
        )
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        value = loss[0] if isinstance(loss, tuple) else loss
        self.losses.append(float(value.detach()))
        return loss


def train(encoder: qe.Encoder, rows: Any, tmp_path: Path, packing: bool) -> Recording:
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        max_length=1024,
        packing=packing,
        packing_strategy="bfd",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(TINY))
    trainer = Recording(
        model=tiny_model(encoder), args=args, train_dataset=rows, processing_class=tokenizer
    )
    trainer.train()
    return trainer


def rows_for(encoder: qe.Encoder, columns: str) -> Any:
    encoded = data.encode_dataset(
        datasets.Dataset.from_list(conversations()),
        encoder,
        columns=columns,  # type: ignore[arg-type]
    )
    assert encoded["error"] == [None] * len(encoded)
    return encoded


def segments(batch: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of each sequence in a collated batch: the rows of a padded batch, or
    the pieces of a packed (padding-free) one, cut where position_ids restart at 0."""
    ids, labels = batch["input_ids"], batch["labels"]
    out = []
    if "position_ids" in batch and ids.shape[0] == 1:
        positions = batch["position_ids"][0].tolist()
        starts = [i for i, p in enumerate(positions) if p == 0] + [len(positions)]
        for begin, end in itertools.pairwise(starts):
            out.append((ids[0, begin:end].tolist(), labels[0, begin:end].tolist()))
        return out
    for row in range(ids.shape[0]):
        length = int(batch["attention_mask"][row].sum())
        out.append((ids[row, :length].tolist(), labels[row, :length].tolist()))
    return out


def check_labels(trainer: Recording, encoder: qe.Encoder) -> int:
    by_ids = {}
    for request in conversations():
        encoding = encoder.encode_messages(
            json.loads(request["messages"]), add_generation_prompt=False
        )
        by_ids[tuple(encoding.input_ids.tolist())] = encoding.assistant_mask
    checked = 0
    for batch in trainer.batches:
        for ids, labels in segments(batch):
            mask = by_ids[tuple(ids)]  # every sequence is one of our rows, whole
            trained = [label != -100 for label in labels]
            # The first token of a sequence (<|im_start|>) is never trained, and a packed batch
            # sets it to -100 anyway; everywhere, trained == the assistant mask.
            assert trained == mask.tolist()
            assert [label for label in labels if label != -100] == list(np.asarray(ids)[mask])
            checked += 1
    assert all(math.isfinite(loss) for loss in trainer.losses) and len(trainer.losses) == 2
    return checked


@pytest.mark.parametrize("columns", ["trl", "axolotl"])
def test_sft_trainer_unpacked_trains_on_assistant_tokens(
    encoder: qe.Encoder, tmp_path: Path, columns: str
) -> None:
    trainer = train(encoder, rows_for(encoder, columns), tmp_path, packing=False)
    assert check_labels(trainer, encoder) == 8  # 2 steps of 4 rows


def test_sft_trainer_packed_bfd_trains_on_assistant_tokens(
    encoder: qe.Encoder, tmp_path: Path
) -> None:
    trainer = train(encoder, rows_for(encoder, "trl"), tmp_path, packing=True)
    assert "position_ids" in trainer.batches[0]  # bfd is padding-free: sequences cut by position
    assert check_labels(trainer, encoder) > 8  # packed: more than one row per packed sequence


def test_axolotl_columns_shape_and_masking(encoder: qe.Encoder) -> None:
    rows = rows_for(encoder, "axolotl")
    assert rows.column_names == ["input_ids", "attention_mask", "labels", "num_tokens", "error"]
    for row, request in zip(rows, conversations(), strict=True):
        encoding = encoder.encode_messages(
            json.loads(request["messages"]), add_generation_prompt=False
        )
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["attention_mask"])
        assert row["attention_mask"] == [1] * len(encoding)
        assert row["labels"] == np.where(encoding.assistant_mask, encoding.input_ids, -100).tolist()
        # The closing <|im_end|> of an assistant turn is trained; the "\n" after it is not.
        end = encoder.marker_ids["<|im_end|>"]
        ids = row["input_ids"]
        for at, token in enumerate(ids[:-1]):
            if token == end and row["labels"][at] != -100:
                assert row["labels"][at + 1] == -100
