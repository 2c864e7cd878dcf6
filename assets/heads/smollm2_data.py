"""Self-distillation text for drafters of the default model (SmolLM2-135M-Instruct): its own greedy answers.

Greedy verification accepts exactly what the target says, so a drafter (EAGLE/Medusa heads, the
self-speculative adapter) should learn the target's own text, not a corpus. This script writes that text:
1. chat requests built from templates (programming tasks from the standard library's documented functions,
   explanations of general concepts), run through the chat template and answered greedily by the model;
2. code continuations: the first lines of training-split standard-library files, continued greedily.
Each transcript (prompt + answer) is one document, separated by the tokenizer's EOS text, in a few .txt files
that `python -m decoding train-heads --data DIR --distill 0` reads. The held-out bench requests
(bench/prompts/heldout_chat.jsonl) are never used: any template request that shares a key phrase with them is
dropped, and the script refuses to run if one slips through.

    python assets/heads/smollm2_data.py --out /tmp/smol_data            # ~600 requests, 160 new tokens each

For millions of tokens (batched on the int8 kernel, resumable, with a manifest) see smollm2_distill.py, which
reuses this file's templates.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "assets"))

from decoding.models.fetch import fetch_default  # noqa: E402
from stdlib_corpus import is_heldout, list_files, read_text, stdlib_root  # noqa: E402

MODULES = ["json", "os.path", "re", "itertools", "functools", "math", "statistics", "string", "textwrap",
           "datetime", "pathlib", "random", "heapq", "bisect", "shutil", "glob", "fnmatch", "difflib", "base64",
           "hashlib", "collections", "operator", "copy", "urllib.parse", "html", "calendar", "uuid", "zlib",
           "gzip", "tempfile", "secrets", "fractions", "decimal", "time", "shlex", "unicodedata", "struct",
           "ipaddress", "email.utils", "posixpath", "tokenize", "keyword", "pprint", "reprlib", "enum"]
CODE_TEMPLATES = ["Write a Python function that {task}.", "Explain what `{mod}.{name}` does in Python, with an example.",
                  "Show me how to use `{mod}.{name}` in a short Python script.",
                  "Write a Python function without `{mod}.{name}` that {task}."]
CONCEPTS = ["recursion", "a hash table", "binary search", "the difference between a process and a thread",
            "what an API is", "big-O notation", "a linked list", "how HTTPS keeps data private", "garbage collection",
            "what a compiler does", "unit testing", "version control", "a stack and a queue", "how DNS works",
            "what JSON is", "regular expressions", "a database index", "caching", "an operating system",
            "machine learning", "photosynthesis", "the water cycle", "gravity", "inflation in economics",
            "how vaccines work", "the French Revolution", "climate change", "the Pythagorean theorem",
            "prime numbers", "probability", "how a car engine works", "the speed of light", "supply and demand",
            "the immune system", "electric circuits", "the solar system", "a neural network", "encryption",
            "how a web browser loads a page", "object-oriented programming", "functional programming",
            "a virtual machine", "the difference between RAM and storage", "open source software"]
GENERAL = ["Explain {c} in simple terms.", "What is {c}? Give a short answer.", "Teach me {c} like I am twelve.",
           "Write two sentences about {c}."]
TASKS = ["Write a short email to a colleague asking to move a meeting to Friday.", "Suggest a name for a bakery.",
         "Write a haiku about autumn.", "List five healthy breakfast ideas.", "How can I improve my sleep?",
         "Summarize the plot of Romeo and Juliet in three sentences.", "Write a short story about a robot who learns to paint.",
         "What are good habits for learning a new language?", "Give me a packing list for a weekend hiking trip.",
         "How do I make a cup of tea?", "Write a thank-you note to a teacher.", "What should I know before adopting a cat?",
         "Describe a sunset over the sea.", "How do I prepare for a job interview?", "Write a limerick about a cat.",
         "Plan a three-day trip to Rome.", "What are the benefits of regular exercise?", "Explain how to change a flat tire.",
         "Write a product description for a reusable water bottle.", "How can I save money on groceries?"]
# Everyday programming requests in everyday words (the templated ones above read like docstrings): what users ask.
# Written without looking at the held-out requests' topics beyond HELDOUT_PHRASES, which drops any overlap.
EVERYDAY_TASKS = [
    "reverses a string", "returns the largest number in a list", "computes the factorial of n",
    "returns the n-th Fibonacci number", "checks whether a number is prime", "removes duplicates from a list while "
    "keeping the order", "flattens a nested list", "sorts a list of dictionaries by a key",
    "finds the second largest number in a list", "counts the vowels in a string", "converts Celsius to Fahrenheit",
    "computes the average of a list of numbers", "finds the common elements of two lists",
    "checks whether two strings are anagrams", "capitalizes the first letter of every word",
    "returns the sum of the digits of an integer", "reads a text file and returns its lines",
    "writes a list of strings to a file, one per line", "validates an email address with a regular expression",
    "generates a random password", "computes the greatest common divisor of two numbers",
    "converts a decimal number to binary", "finds the longest word in a sentence", "splits a list into chunks of size n",
    "rotates a list by k positions", "transposes a matrix", "multiplies two matrices", "checks whether a year is a leap year",
    "returns the median of a list of numbers", "returns the even numbers of a list", "computes compound interest",
    "counts the lines in a file", "returns the most common element of a list", "implements binary search",
    "implements bubble sort", "implements quicksort", "implements a stack", "implements a queue with two stacks",
    "checks whether the brackets in a string are balanced", "converts a Roman numeral to an integer",
    "converts an integer to a Roman numeral", "returns all subsets of a list", "returns all permutations of a string",
    "finds the missing number in a list of 1 to n", "computes the dot product of two vectors",
    "collapses repeated whitespace in a string", "shortens a string to n characters with an ellipsis",
    "returns the weekday of a date string", "returns the number of days between two dates",
    "measures how long another function takes to run", "retries a function up to three times",
    "reads a JSON file and returns one of its keys", "finds the first non-repeating character in a string",
    "checks whether a list is sorted", "inverts a dictionary", "groups words by their first letter",
    "computes the area of a circle", "computes the distance between two points", "converts a list of strings to integers",
    "replaces every space in a string with an underscore", "returns the squares of the numbers 1 to n",
    "checks whether a string contains only digits", "finds the index of an item in a list or returns -1",
    "computes the running total of a list", "removes the vowels from a string", "converts seconds to hours, minutes "
    "and seconds", "returns the n largest items of a list", "checks whether a number is a perfect square",
    "prints a multiplication table", "simulates rolling two dice"]
EVERYDAY_PHRASES = ["Write a Python function that {t}.", "How do I write a Python function that {t}?",
                    "Write a short Python program that {t}, and explain how it works."]
PYTHON_TOPICS = ["list comprehensions", "decorators", "generators", "context managers", "lambda functions",
                 "exceptions and try/except", "f-strings", "type hints", "virtual environments", "dictionaries", "sets",
                 "slicing", "default arguments", "classes and inheritance", "modules and imports",
                 "the if __name__ == \"__main__\" idiom", "enumerate", "zip", "sorting with a key function",
                 "dataclasses", "properties", "iterators", "map and filter", "closures", "the global interpreter lock",
                 "unit tests with unittest", "the logging module", "string methods", "reading and writing files",
                 "while loops"]
PYTHON_PAIRS = ["== and is", "a function and a method", "a for loop and a while loop", "return and print",
                "a module and a package", "break and continue", "*args and **kwargs", "a deep copy and a shallow copy",
                "a class and an instance", "local and global variables", "an iterator and a generator",
                "str() and repr()"]


def everyday_requests() -> list[str]:
    """EVERYDAY_TASKS in each phrasing, Python topics explained, and differences between two Python ideas."""
    out = [p.format(t=t) for t in EVERYDAY_TASKS for p in EVERYDAY_PHRASES]
    out += [f"Explain {t} in Python with a short example." for t in PYTHON_TOPICS]
    out += [f"What is the difference between {pair} in Python?" for pair in PYTHON_PAIRS]
    return [r for r in out if not any(p in r.lower() for p in HELDOUT_PHRASES)]


HELDOUT_PHRASES = ["palindrome", "list and a tuple", "each word appears", "404", "bank account", "commit message",
                   "merges two sorted", "merge two sorted", "csv"]


def chat_requests(seed: int = 0) -> list[str]:
    """Template requests: stdlib functions with a docstring (task = its first line), concepts, everyday tasks."""
    rng, out = random.Random(seed), []
    for mod_name in MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name, fn in sorted(vars(mod).items()):
            doc = inspect.getdoc(fn) if callable(fn) and not name.startswith("_") else None
            first = (doc or "").strip().splitlines()[0].strip().rstrip(".") if doc else ""
            if 12 <= len(first) <= 120 and not first.startswith(("(", "Return a new", name)):
                task = first[0].lower() + first[1:]
                out.append(rng.choice(CODE_TEMPLATES).format(task=task, mod=mod_name, name=name))
    out += [t.format(c=c) for c in CONCEPTS for t in rng.sample(GENERAL, 2)] + TASKS
    out = [r for r in dict.fromkeys(out) if not any(p in r.lower() for p in HELDOUT_PHRASES)]
    rng.shuffle(out)
    return out


def code_prompts(tok, n: int, tokens: int = 64, seed: int = 0) -> list[str]:
    """The first `tokens` tokens of n training-split standard-library files (held-out files never)."""
    if n <= 0:
        return []
    root, rng = stdlib_root(), random.Random(seed)
    files = [f for f in list_files(root) if not is_heldout(f)]
    rng.shuffle(files)
    out = []
    for rel in files:
        text = read_text(root, rel)
        ids = tok(text or "")["input_ids"][:tokens]
        if len(ids) == tokens:
            out.append(tok.decode(ids))
        if len(out) == n:
            break
    return out


def check_heldout(requests: list[str]) -> None:
    held = [json.loads(line)["chat"] for line in (ROOT / "bench/prompts/heldout_chat.jsonl").read_text().splitlines()]
    leaked = set(held) & set(requests)
    if leaked:
        raise SystemExit(f"held-out requests in the training set: {sorted(leaked)}")


@torch.inference_mode()
def answer(model, tok, texts: list[str], new: int, batch: int, log) -> list[str]:
    """Greedy continuations, batched with left padding (tiny numerical differences from batch-1 greedy do not
    matter for training data)."""
    tok.padding_side, out, t0 = "left", [], time.time()
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True)
        ids = model.generate(**enc, do_sample=False, max_new_tokens=new, pad_token_id=tok.pad_token_id)
        out += [tok.decode(row[enc["input_ids"].shape[1]:], skip_special_tokens=False).replace(tok.pad_token, "")
                for row in ids]
        done = i + len(texts[i:i + batch])
        log(f"answered {done}/{len(texts)} ({time.time() - t0:.0f} s, ETA {(time.time() - t0) / done * (len(texts) - done):.0f} s)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--chat", type=int, default=480, help="chat requests to answer")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N templated requests (answered by an earlier run)")
    ap.add_argument("--everyday", action="store_true", help="also answer the everyday requests (everyday_requests())")
    ap.add_argument("--code", type=int, default=160, help="code files to continue")
    ap.add_argument("--new", type=int, default=160, help="new tokens per answer")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = fetch_default()
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    requests = chat_requests()[a.skip:a.chat] + (everyday_requests() if a.everyday else [])
    check_heldout(requests)
    chats = [tok.apply_chat_template([{"role": "user", "content": r}], add_generation_prompt=True, tokenize=False)
             for r in requests]
    codes = code_prompts(tok, a.code)
    a.out.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    for name, texts in (("chat", chats), ("code", codes)) if codes else (("chat", chats),):
        answers = answer(model, tok, texts, a.new, a.batch, log)
        docs = [t + ans for t, ans in zip(texts, answers)]
        (a.out / f"{name}.txt").write_text(tok.eos_token.join(docs) + tok.eos_token)
        log(f"wrote {a.out / f'{name}.txt'}: {len(docs)} documents")
    (a.out / "requests.json").write_text(json.dumps(requests, indent=0))
    (a.out / "DONE").write_text("ok\n")


if __name__ == "__main__":
    main()
