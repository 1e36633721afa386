#!/usr/bin/env python3
"""Build ``fixtures/qwen3.8-tiny``: a small vocabulary with the Qwen 3.8 layout (tests, demos).

What is the same as the real Qwen/Qwen3.8-27B vocabulary (copied from its ``tokenizer.json`` in
``../shared/checkpoints/qwen3.8-27b``, which must exist beside the repository):

* the normalizer (NFC), the pre-tokenizer (the Qwen regex Split + ByteLevel without its own regex),
  the post-processor and the decoder, as JSON, verbatim;
* the 33 added tokens, in the same order, with the same flags, numbered right after the base
  vocabulary instead of from 248044;
* the chat template, a byte copy (so ``qwen-encode validate`` recognises it by its sha256).

What differs: the byte-level BPE base vocabulary is trained here, deterministically, on a small
text sample this script writes itself (multilingual prose, code, chat-like protocol text); no
download. So the token IDs are NOT the real ones: this vocabulary exercises every code path offline,
it does not reproduce the real model's IDs.

Running the script twice gives byte-identical files (checked by ``--check``).

    python scripts/make_tiny_vocab.py            # (re)write fixtures/qwen3.8-tiny
    python scripts/make_tiny_vocab.py --check    # exit 1 if the committed files differ
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, pre_tokenizers, trainers

from qwen_encode.files import write_atomic

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "checkpoints" / "qwen3.8-27b"
OUT = ROOT / "fixtures" / "qwen3.8-tiny"

# sha256 of the official chat_template.jinja (Qwen/Qwen3.8-27B, revision 1d4bf0f2…): the copy must
# be byte-exact, or validation would report "another protocol".
TEMPLATE_SHA256 = "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041"

# Base vocabulary size (256 byte symbols + merges). A few thousand: enough that common words,
# JSON punctuation and the protocol's tag text are single tokens, small enough to commit.
BASE_VOCAB_SIZE = 2048

# Embedding rows are padded to a multiple of this, as real checkpoints pad theirs (248320).
EMBEDDING_MULTIPLE = 64

# --------------------------------------------------------------------------------------------
# The training sample. Written out here rather than downloaded, so the fixture is reproducible
# anywhere; varied enough (scripts, code, JSON, protocol text) that every kind of pre-token the
# Qwen regex produces (letters with marks, CJK, digits, punctuation runs, newlines, spaces) occurs.

PROSE = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single
step. Please summarise the following report in three sentences, and list any open questions.
The weather in Paris is mild today: 18 degrees, light rain in the afternoon, clearing by evening.
Could you check whether the train to Berlin leaves at 9:45 or at 10:15? I'd like a window seat.
We've shipped version 2.3.1 with faster start-up, fewer crashes and a new export button.
It's important to validate key assumptions before drawing conclusions from a small sample.
Der schnelle braune Fuchs springt über den faulen Hund. Wie wird das Wetter morgen in München?
Könnten Sie mir bitte die Öffnungszeiten des Museums nennen? Größe, Straße, Mädchen, Übung.
Le renard brun rapide saute par-dessus le chien paresseux. Quel temps fera-t-il demain à Lyon ?
Où se trouve la gare la plus proche ? Je voudrais réserver une table pour deux personnes, s'il vous
plaît. Déjà, être, naïve, garçon, cœur, élève, façade.
El rápido zorro marrón salta sobre el perro perezoso. ¿Qué tiempo hará mañana en Madrid?
¡Hola! ¿Cómo estás? Necesito ayuda con mi pedido número 4521, llegó dañado. Año, niño, corazón.
La volpe marrone veloce salta sopra il cane pigro. Che tempo farà domani a Roma? Perché no?
A rápida raposa marrom pula sobre o cão preguiçoso. Qual é a previsão do tempo para São Paulo?
Быстрая коричневая лиса прыгает через ленивую собаку. Какая погода будет завтра в Москве?
Пожалуйста, переведите этот текст на английский язык. Спасибо за вашу помощь!
敏捷的棕色狐狸跳过了懒狗。明天北京的天气怎么样？请帮我把这段文字翻译成英文。
我们需要在周五之前完成这个项目的测试和部署。这个函数的时间复杂度是多少？谢谢你的帮助！
素早い茶色の狐がのろまな犬を飛び越えます。明日の東京の天気はどうですか？
このコードのバグを見つけてください。ありがとうございます。カタカナ、ひらがな、漢字。
빠른 갈색 여우가 게으른 개를 뛰어넘습니다. 내일 서울 날씨는 어떤가요? 감사합니다.
الثعلب البني السريع يقفز فوق الكلب الكسول. كيف سيكون الطقس غدا في القاهرة؟ شكرا جزيلا.
तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। कल दिल्ली में मौसम कैसा रहेगा? धन्यवाद।
Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. Ευχαριστώ πολύ!
Szybki brązowy lis przeskakuje nad leniwym psem. Dziękuję bardzo! Zażółć gęślą jaźń.
Hızlı kahverengi tilki tembel köpeğin üzerinden atlar. Yarın İstanbul'da hava nasıl olacak?
Con cáo nâu nhanh nhẹn nhảy qua con chó lười. Thời tiết ngày mai ở Hà Nội thế nào?
Emoji and symbols: 🙂 👍 🚀 ✅ ❌ ★ → ← ≤ ≥ ± × ÷ € £ ¥ © ® ™ ° µ § ¶ … — – «» “” ‘’.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 1,000,000 -273.15 1e-9 0x1F 50% #7.
"""

CODE = '''\
def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    sequence = [0, 1]
    while len(sequence) < n:
        sequence.append(sequence[-1] + sequence[-2])
    return sequence[:n]


class Cache(dict):
    def __missing__(self, key):
        value = self[key] = compute(key)
        return value


if __name__ == "__main__":
    import sys
    for line in sys.stdin:
        print(json.dumps({"text": line.rstrip("\\n"), "length": len(line)}))

function debounce(fn, wait = 100) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn.apply(this, args), wait);
  };
}
const result = await fetch(`/api/v1/users/${id}?include=profile`).then((r) => r.json());

#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) {
        printf("%d: %s\\n", i, argv[i]);
    }
    return 0;
}

SELECT id, name, created_at FROM users WHERE status = 'active' ORDER BY created_at DESC LIMIT 10;

#!/usr/bin/env bash
set -euo pipefail
for f in *.jsonl; do wc -l "$f"; done | sort -n > counts.txt

{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather",
 "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type":
 "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
{"name": "search", "arguments": {"query": "qwen tokenizer", "max_results": 5, "safe": true}}
<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=unit>
celsius
</parameter>
</function>
</tool_call>
'''


def _pool(text: str) -> tuple[str, ...]:
    return tuple(text.split("|"))


# Pieces combined into chat-like turns (questions, answers, reasoning, tool calls).
_SUBJECTS = _pool(
    "the report|this function|my order|the weather|the deployment|the invoice|"
    "the test suite|la réunion|el pedido|der Vertrag|这个问题|この設定|the API|the database|"
    "the tokenizer|the model"
)
_ASKS = _pool(
    "Can you explain|Please summarise|What is wrong with|How do I fix|Translate|Check|"
    "Compare|Why does|Erkläre|Explique|请解释|説明して"
)
_THOUGHTS = _pool(
    "The user wants|First, I need to|Let me check|So the answer is|"
    "Wait, that is not right.|I should call the tool|Okay, the result says|"
    "Considering the alternatives,|The key assumption is"
)
_TOOLS = _pool(
    "get_weather|search|run_python|read_file|send_email|calculator|lookup_order|translate_text"
)
_PARAMS = _pool("city|query|code|path|to|expression|order_id|text|unit|language|max_results")
_VALUES = _pool(
    "Paris|Berlin|42|print(1 + 1)|/etc/hosts|ops@example.com|3 * (4 + 5)|A-1024|"
    "hello world|celsius|de|5|true|[1, 2, 3]"
)


def _chat_sample(seed: int, count: int) -> list[str]:
    """Deterministic chat-like conversations rendered with the protocol's own texts (tools block,
    reasoning instructions), markers left out: they are added tokens, never BPE merges."""
    # Imported here so the rest of the script (and its clear failure when ../shared is absent)
    # does not depend on the package; the checkout's own copy is used when it is not installed.
    sys.path.insert(0, str(ROOT))
    from qwen_encode import Text, format_prompt

    rng = random.Random(seed)
    texts = []
    for n in range(count):
        subject = rng.choice(_SUBJECTS)
        tool = rng.choice(_TOOLS)
        params = rng.sample(_PARAMS, 2)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool,
                    "description": f"{rng.choice(_ASKS)} {subject}",
                    "parameters": {
                        "type": "object",
                        "properties": {p: {"type": "string"} for p in params},
                        "required": params[:1],
                    },
                },
            }
        ]
        messages = [
            {"role": "system", "content": f"You are a helpful assistant. Session {n}."},
            {"role": "user", "content": f"{rng.choice(_ASKS)} {subject}?"},
            {
                "role": "assistant",
                "reasoning_content": f"{rng.choice(_THOUGHTS)} {subject}. {rng.choice(_THOUGHTS)}",
                "content": "",
                "tool_calls": [
                    {
                        "function": {
                            "name": tool,
                            "arguments": {p: rng.choice(_VALUES) for p in params},
                        }
                    }
                ],
            },
            {"role": "tool", "content": json.dumps({"result": rng.choice(_VALUES), "ok": True})},
            {"role": "assistant", "content": f"{rng.choice(_THOUGHTS)} {rng.choice(_VALUES)}."},
        ]
        prompt = format_prompt(
            messages,
            tools=tools if n % 3 else None,
            reasoning_effort=("low", "medium", "xhigh")[n % 3],
            add_generation_prompt=False,
        )
        texts.append("".join(s.text if isinstance(s, Text) else "\n" for s in prompt.segments))
    return texts


# --------------------------------------------------------------------------------------------


def _fail(message: str) -> None:
    print(f"make_tiny_vocab: {message}", file=sys.stderr)
    raise SystemExit(1)


def _load_reference() -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """The real checkpoint's tokenizer.json and tokenizer_config.json, and its template bytes."""
    if not SHARED.is_dir():
        _fail(
            f"{SHARED} is absent: this script copies the Qwen 3.8 tokenizer layout and chat "
            "template from the real checkpoint files in ../shared/checkpoints beside the "
            "repository. The committed fixtures/qwen3.8-tiny is usable as is."
        )
    try:
        tokenizer_json = json.loads((SHARED / "tokenizer.json").read_text(encoding="utf-8"))
        config = json.loads((SHARED / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = (SHARED / "chat_template.jinja").read_bytes()
    except (OSError, json.JSONDecodeError) as error:
        _fail(f"cannot read the reference checkpoint in {SHARED}: {error}")
    if hashlib.sha256(template).hexdigest() != TEMPLATE_SHA256:
        _fail(f"{SHARED / 'chat_template.jinja'} is not the official Qwen 3.8 template")
    return tokenizer_json, config, template


def _train(reference: dict[str, Any], sample: list[str]) -> dict[str, Any]:
    """Train the base BPE with the reference's exact normalizer and pre-tokenizer."""
    tokenizer = Tokenizer.from_str(
        json.dumps(
            {
                "version": "1.0",
                "truncation": None,
                "padding": None,
                "added_tokens": [],
                "normalizer": reference["normalizer"],
                "pre_tokenizer": reference["pre_tokenizer"],
                "post_processor": reference["post_processor"],
                "decoder": reference["decoder"],
                "model": {"type": "BPE", "vocab": {}, "merges": []},
            }
        )
    )
    trainer = trainers.BpeTrainer(
        vocab_size=BASE_VOCAB_SIZE,
        min_frequency=1,
        show_progress=False,
        # Every byte is a symbol, whether the sample holds it or not: byte-level BPE never needs
        # an unknown token.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tokenizer.train_from_iterator(sample, trainer=trainer)
    return json.loads(tokenizer.to_str())["model"]


def build() -> dict[str, bytes]:
    """Every file of the fixture, as bytes."""
    reference, reference_config, template = _load_reference()
    sample = [PROSE, CODE, template.decode("utf-8"), *_chat_sample(seed=38, count=300)]
    model = _train(reference, sample)

    base = len(model["vocab"])
    if sorted(model["vocab"].values()) != list(range(base)):
        _fail("the trained base vocabulary is not numbered 0..n-1")
    # The reference model's settings (dropout, byte_fallback, ...) with the trained vocab/merges.
    model = {**reference["model"], "vocab": model["vocab"], "merges": model["merges"]}

    added = []
    for offset, token in enumerate(reference["added_tokens"]):
        added.append({**token, "id": base + offset})
    ids = {token["content"]: token["id"] for token in added}
    total = base + len(added)

    tokenizer_json = {
        "version": reference["version"],
        "truncation": None,
        "padding": None,
        # added_tokens before model: readers (and validation) find them without parsing the vocab.
        "added_tokens": added,
        "normalizer": reference["normalizer"],
        "pre_tokenizer": reference["pre_tokenizer"],
        "post_processor": reference["post_processor"],
        "decoder": reference["decoder"],
        "model": model,
    }

    config = {
        key: value
        for key, value in reference_config.items()
        # The template lives in chat_template.jinja (what transformers prefers); a second copy
        # here would only be a second thing to keep identical.
        if key not in ("chat_template", "added_tokens_decoder")
    }
    config["added_tokens_decoder"] = {
        str(token["id"]): {
            "content": token["content"],
            "lstrip": token["lstrip"],
            "normalized": token["normalized"],
            "rstrip": token["rstrip"],
            "single_word": token["single_word"],
            "special": token["special"],
        }
        for token in added
    }
    config["pad_token"] = "<|endoftext|>"
    config["bos_token"] = None
    config["add_bos_token"] = False
    # transformers keeps key order; a stable order keeps the file byte-identical across runs.
    config = {key: config[key] for key in sorted(config)}

    embedding = -(-total // EMBEDDING_MULTIPLE) * EMBEDDING_MULTIPLE
    model_config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "text_config": {
            "model_type": "qwen3_5_text",
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|endoftext|>"],
            "vocab_size": embedding,
        },
        "tie_word_embeddings": False,
        "_comment": "qwen-encode test fixture: tokenizer files only, no weights; token IDs differ "
        "from Qwen/Qwen3.8-27B",
    }
    generation_config = {
        "bos_token_id": ids["<|endoftext|>"],
        "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 1.0,
        "top_k": 20,
        "top_p": 0.95,
    }

    def dump(value: Any, indent: int | None = 2) -> bytes:
        return (json.dumps(value, ensure_ascii=False, indent=indent) + "\n").encode("utf-8")

    readme = f"""\
# qwen3.8-tiny: a test and demo vocabulary

**Not the real Qwen 3.8 vocabulary. Token IDs differ from Qwen/Qwen3.8-27B.** Do not use the IDs
this folder produces with a real model.

A small byte-level BPE vocabulary ({base} base tokens + the 33 added tokens at IDs
{base}-{total - 1}) with the layout of the Qwen 3.8 tokenizer: the same NFC normalizer, the same
pre-tokenizer (Qwen regex split + byte-level), post-processor and decoder, the same 33 added tokens
in the same order with the same flags, and a byte copy of the official `chat_template.jinja`
(sha256 {TEMPLATE_SHA256}).

The base vocabulary was trained by `scripts/make_tiny_vocab.py` on a small text sample written in
that script. It lets every code path of qwen-encode (encoding, validation, parsing, the CLI) run
offline:

    qwen-encode encode --model fixtures/qwen3.8-tiny examples/chat.jsonl
    qwen-encode validate fixtures/qwen3.8-tiny

The same commands take `--model Qwen/Qwen3.8-27B` (or a local checkpoint folder) for real IDs.

| ID | token |
|---|---|
""" + "".join(f"| {token['id']} | `{token['content']}` |\n" for token in added)

    files = {
        "tokenizer.json": dump(tokenizer_json, indent=None),
        "tokenizer_config.json": dump(config),
        "chat_template.jinja": template,
        "config.json": dump(model_config),
        "generation_config.json": dump(generation_config),
        "README.md": readme.encode("utf-8"),
    }
    _self_check(files, ids)
    return files


def _self_check(files: dict[str, bytes], ids: dict[str, int]) -> None:
    """Every added token must load at its declared ID and encode to itself, atomically."""
    tokenizer = Tokenizer.from_str(files["tokenizer.json"].decode("utf-8"))
    for content, token_id in ids.items():
        if tokenizer.token_to_id(content) != token_id:
            _fail(f"{content!r} did not load at ID {token_id}")
        if tokenizer.encode(content, add_special_tokens=False).ids != [token_id]:
            _fail(f"{content!r} does not encode to [{token_id}]")
    text = "Hello, wörld! 你好 <|im_end|> 12345\n\n  x"
    if tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) != text:
        _fail("round trip through the trained vocabulary is not lossless")


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=OUT, help="output folder (default fixtures/qwen3.8-tiny)"
    )
    parser.add_argument(
        "--check", action="store_true", help="compare with the files in --out instead of writing"
    )
    args = parser.parse_args(argv)
    files = build()
    if args.check:
        stale = [
            name
            for name, data in files.items()
            if not (args.out / name).is_file() or (args.out / name).read_bytes() != data
        ]
        if stale:
            print(f"out of date in {args.out}: {', '.join(stale)}", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        # Atomic per file: an interrupted run never leaves a truncated tokenizer.json behind.
        write_atomic(args.out / name, data)
    total = sum(len(data) for data in files.values())
    for name, data in files.items():
        print(f"{len(data):>9,}  {_shown(args.out / name)}")
    print(f"{total:>9,}  total")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
