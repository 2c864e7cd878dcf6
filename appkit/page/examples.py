"""The page's examples follow the model: chat requests for a model with a chat template, code otherwise.

A chat request is shown as the model receives it (the tokenizer's chat template applied, as text whose
tokenization is exactly the template's ids), so what the step view numbers is what the prompt box holds. The
embedded 10M code model cannot answer a chat request (it prints garbage), so it gets code with repetition.
"""
from __future__ import annotations

import json
from pathlib import Path

VECTOR = ("class Vector:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
          "    def __add__(self, other):\n        return Vector(self.x + other.x, self.y + other.y)\n\n"
          "    def __sub__(self, other):")
EXAMPLES = [  # code with repetition first (what the embedded models know: the Python standard library)
    [VECTOR],
    ["class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):"],
    ["def fibonacci(n):"],
    ["import os\n\n\ndef list_python_files(root):\n    \"\"\"Return every .py file under root.\"\"\""],
]
# Aggressive decoding (Ge et al.): an edit whose input is the reference. The embedded 10M model cannot
# follow instructions; it writes this codec boilerplate from memory (the stdlib has ~100 copies), so
# "fixing" the input means writing it out again: reference lookup copies 20+ tokens a step where the
# input is right, and the model's own token replaces each typo (bench/methods/jacobi_reference.py measures it).
CODEC = ("class Codec(codecs.Codec):\n\n    def encode(self,input,errors='strict'):\n"
         "        return codecs.charmap_encod(input,errors,encoding_map)\n\n    def decode(self,input,errors='strict'):\n"
         "        return codecs.charmap_decode(input,errors,decoding_table)\n\n"
         "class IncrementalEncoder(codecs.IncrementalEncoder):\n    def encode(self, input, final=False):\n"
         "        return codecs.charmap_encode(input,self.errors,encoding_map)[0]\n\n"
         "class IncrementalDecodr(codecs.IncrementalDecoder):\n    def decode(self, input, final=False):\n"
         "        return codecs.charmap_decode(input,self.errors,decoding_table)[0]\n\n"
         "class StreamWriter(Codec,codecs.StreamWriter):\n    pass\n\nclass StreamReader(Codec,codecs.StreamReader):\n"
         "    pass\n\n### encodings module API\n\ndef getregentry():\n    return codecs.CodecInfo(\n"
         "        name='cp1251',\n        encode=Codec().encode,\n        decode=Codec().decode,\n"
         "        incrementalencoder=IncrementalEncoder,\n        incrementaldecoder=IncrementalDecoder,\n"
         "        streamreader=StreamReadr,\n        streamwriter=StreamWriter,\n    )\n")
EDIT_PROMPT = '"""Fix the typos in this codec module."""\n\nimport codecs\n\n### Codec APIs\n\nclass Codec(codecs.Codec):'
EDIT_EXAMPLES = [[EDIT_PROMPT, CODEC, "prompt_lookup"]]

# Requests for a chat model; the bench's held-out requests (bench/prompts/heldout_chat.jsonl) are not here.
CHAT = [
    "Write a Python function that reverses a string, and explain how it works.",
    "What is a hash table? Answer in two sentences.",
    "Write a Python class Point with x and y, and methods to add and subtract two points.",
    "List the planets of the solar system in order from the Sun.",
]


def chat_template(folder: str) -> bool:
    """Whether a local model folder's tokenizer has a chat template (read without loading the model)."""
    try:
        cfg = json.loads((Path(folder) / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(cfg.get("chat_template")) or (Path(folder) / "chat_template.jinja").is_file()


def examples_for(folder: str | None) -> tuple[list[list[str]], str]:
    """(examples, label) for the page's prompt box, given the default model's local folder (None: not here)."""
    if folder and chat_template(folder):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(folder)
        shown = [tok.apply_chat_template([{"role": "user", "content": r}], add_generation_prompt=True,
                                         tokenize=False) for r in CHAT]
        return [[t] for t in shown] + [[VECTOR]], "examples: chat requests (chat template applied), then code"
    return EXAMPLES, "examples: code with repetition (this model is a code model, not a chat model)"


def example_labels(rows: list[list[str]]) -> list[str]:
    """What each example button reads: a chat example's user request (every templated example starts with
    the same system line, so the buttons looked alike), a code example's first line."""
    out = []
    for row in rows:
        text = str(row[0])
        request = next((r for r in CHAT if r in text), None)
        first = text.strip().splitlines()[0] if text.strip() else ""
        out.append(request or (first if len(first) <= 60 else first[:59] + "…") + (" …" if "\n" in text else ""))
    return out
