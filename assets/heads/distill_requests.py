"""The requests behind the self-distillation data (smollm2_distill.py), built without the model, and the held-out
filter every request passes, the model-written ones included.

Three sources:
- "template": smollm2_data.py's requests (stdlib functions, concepts, everyday programming) plus families
  combined here for variety: explanations, writing tasks, advice, code in other languages, comparisons,
  arithmetic, rewriting; seeded, deduplicated;
- "code": windows of training-split standard-library files (stdlib_corpus.is_heldout's files never, nor the
  files the bench's code prompts come from), continued by the model;
- "asked": requests the model itself writes when sampled as the *user* of its chat template (ask_prefix), then
  deduplicated and filtered here (clean_asked).

Held out: every prompt file in bench/prompts (the held-out chat and code sets and the bench's own prompts).
A request is dropped if it equals a held-out request, contains one of HELDOUT_PHRASES (the held-out topics'
key phrases) or shares a run of NGRAM words with a held-out prompt; a code window is dropped if it shares a
line of NGRAM_CHARS characters or more with one. tests/test_distill_data.py checks the built lists.
"""
from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
for p in (ROOT, ROOT / "scripts" / "assets", HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import smollm2_data as base  # noqa: E402
from stdlib_corpus import is_heldout, list_files, read_text, stdlib_root  # noqa: E402

PROMPTS = ROOT / "bench" / "prompts"
NGRAM = 6  # words: a shared run this long with a held-out prompt drops a request
NGRAM_CHARS = 24  # characters: a code window sharing a (stripped) line this long with a held-out prompt is dropped
# the held-out requests' topics (smollm2_data's list) and the held-out code prompts' subjects
HELDOUT_PHRASES = sorted(set(base.HELDOUT_PHRASES) | {
    "palindrome", "list and a tuple", "tuple", "word appears", "word count", "count words", "counts words",
    "status code", "bank account", "commit message", "sorted lists", "csv", "inventory", "column_totals",
    "binary_search", "build_parser", "linked list", "retry", "top_words", "class matrix", "matrix class"})

CONCEPTS = base.CONCEPTS + [
    "the greenhouse effect", "plate tectonics", "the theory of evolution", "DNA", "black holes", "the Big Bang",
    "how airplanes fly", "how batteries work", "the internet", "blockchain", "cloud computing", "a CPU cache",
    "multithreading", "the TCP handshake", "a REST API", "SQL joins", "Docker containers", "Kubernetes",
    "a load balancer", "public-key cryptography", "hashing passwords", "a binary tree", "graph search",
    "dynamic programming", "sorting algorithms", "floating-point numbers", "the Fourier transform", "derivatives",
    "integrals", "matrices", "statistics", "the normal distribution", "compound interest", "taxes", "a budget",
    "the stock market", "the Roman Empire", "the Renaissance", "the Industrial Revolution", "World War I",
    "democracy", "the United Nations", "the human heart", "the brain", "sleep", "nutrition", "meditation",
    "the seasons", "tides", "rainbows", "volcanoes", "earthquakes", "the ozone layer", "renewable energy",
    "nuclear power", "recycling", "bees and pollination", "the food chain", "cells", "antibiotics", "viruses",
    "memory in computers", "an algorithm", "a variable in programming", "a loop in programming",
    "an operating system kernel", "a file system", "compression", "Unicode", "time zones", "GPS",
    "how a refrigerator works", "how microwaves heat food", "music theory", "poetry", "the scientific method",
    "critical thinking", "a resume", "negotiation", "leadership", "teamwork", "photosynthesis in plants"]
EXPLAIN = base.GENERAL + ["Can you explain {c}?", "Give me a short overview of {c}.",
                          "Why is {c} important?", "Explain {c} with an everyday analogy.",
                          "What are the key ideas behind {c}?", "Describe {c} in three bullet points."]
FORMS = ["a short poem", "a haiku", "a limerick", "a short story", "a blog post introduction", "a tweet",
         "a product description", "a short speech", "a diary entry", "a short dialogue between two friends",
         "a motivational message", "a riddle", "a news headline and a short summary", "a movie plot idea",
         "a song chorus", "a letter to a friend"]
SUBJECTS = ["the ocean", "a rainy day", "friendship", "a lost key", "coffee", "a dragon who is afraid of fire",
            "space travel", "a small village", "winter", "a city at night", "a first day at school", "a cat",
            "a dog", "the moon", "a time machine", "a forest", "a robot", "a garden", "mountains", "the future",
            "a library", "a train journey", "summer holidays", "a birthday party", "kindness", "a storm",
            "a talking tree", "learning to code", "a lighthouse", "the stars"]
WRITING = ["Write {f} about {s}.", "Can you write {f} about {s}?", "Please write {f} about {s}."]
LETTERS = ["a short email to my manager asking for a day off", "a polite complaint about a late delivery",
           "a cover letter for a junior developer job", "a message inviting friends to a picnic",
           "a reply declining a meeting invitation", "an apology for missing a call",
           "a short note congratulating a friend on a new job", "a reminder to my team about a deadline",
           "a welcome message for a new colleague", "a request to a landlord to fix the heating",
           "a review of a restaurant", "a short bio for a conference speaker"]
ADVICE = ["stay focused while studying", "start running", "learn to cook", "write better essays",
          "reduce stress", "be more productive", "learn a musical instrument", "keep plants alive",
          "make friends in a new city", "start a small business", "speak in public", "organize my desk",
          "drink more water", "learn to draw", "read more books", "manage my time", "prepare for an exam",
          "start learning programming", "choose a laptop", "take better photos", "save for a vacation",
          "stop procrastinating", "write a good resume", "train a puppy", "grow tomatoes"]
ADVICE_PHRASES = ["How can I {a}?", "Give me some tips to {a}.", "What is the best way to {a}?",
                  "I want to {a}. Where should I start?"]
LANGUAGES = ["JavaScript", "Java", "C", "C++", "Go", "Rust", "Bash", "TypeScript", "Ruby", "C#"]
PAIRS = ["a virus and bacteria", "weather and climate", "a CPU and a GPU", "RAM and ROM", "HTTP and HTTPS",
         "SQL and NoSQL databases", "a compiler and an interpreter", "Python and JavaScript", "stocks and bonds",
         "speed and velocity", "mass and weight", "a simile and a metaphor", "an alligator and a crocodile",
         "a republic and a democracy", "TCP and UDP", "git merge and git rebase", "a thread and a coroutine",
         "machine learning and deep learning", "a process and a program", "frontend and backend development",
         "baking soda and baking powder", "a comet and an asteroid", "a lake and a pond", "AC and DC current"]
SENTENCES = ["the meeting got moved because nobody could come", "i think we should try the new restaurant",
             "this product is really good and i like it a lot", "we didnt finish the project on time",
             "the weather was bad so we stayed home", "can you send me the file asap",
             "our team worked hard and the results were great", "the movie was long but interesting"]
REWRITES = ["Rewrite this sentence to sound more formal: \"{s}\"", "Fix the grammar of this sentence: \"{s}\"",
            "Make this sentence more polite: \"{s}\"", "Translate this sentence into French: \"{s}\""]


def heldout_prompts() -> list[str]:
    """Every prompt of every file in bench/prompts (chat requests and code prompts alike)."""
    out = []
    for f in sorted(PROMPTS.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out += [row[k] for k in ("chat", "prompt") if isinstance(row.get(k), str)]
    return out


def bench_sources() -> set[str]:
    """The standard-library files the bench's code prompts come from (their `source`)."""
    out = set()
    for f in sorted(PROMPTS.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                out.add(str(json.loads(line).get("source", "")))
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


class Heldout:
    """What a training request must not share with the held-out prompts."""

    def __init__(self):
        self.prompts = heldout_prompts()
        self.exact = {" ".join(_words(p)) for p in self.prompts}
        self.grams = {tuple(w[i:i + NGRAM]) for p in self.prompts for w in [_words(p)]
                      for i in range(len(w) - NGRAM + 1)}
        self.lines = {ln.strip() for p in self.prompts for ln in p.splitlines() if len(ln.strip()) >= NGRAM_CHARS}

    def why(self, text: str) -> str | None:
        """Why `text` overlaps the held-out prompts, or None."""
        low, w = text.lower(), _words(text)
        if " ".join(w) in self.exact:
            return "a held-out prompt"
        for p in HELDOUT_PHRASES:
            if p in low:
                return f"key phrase {p!r}"
        for i in range(len(w) - NGRAM + 1):
            if tuple(w[i:i + NGRAM]) in self.grams:
                return f"shares {' '.join(w[i:i + NGRAM])!r}"
        for ln in text.splitlines():
            if ln.strip() in self.lines:
                return f"shares the line {ln.strip()!r}"
        return None

    def keep(self, texts: list[str]) -> list[str]:
        return [t for t in texts if self.why(t) is None]


def template_requests(seed: int = 0, heldout: Heldout | None = None) -> list[str]:
    """Every template request, deduplicated, held-out overlaps dropped, in a seeded order."""
    rng = random.Random(seed)
    out = base.chat_requests(seed) + base.everyday_requests()
    out += [t.format(c=c) for c in CONCEPTS for t in rng.sample(EXPLAIN, 4)]
    out += [rng.choice(WRITING).format(f=f, s=s) for f in FORMS for s in SUBJECTS if rng.random() < 0.5]
    out += [f"Write {x}." for x in LETTERS] + [f"Help me write {x}." for x in LETTERS]
    out += [p.format(a=a) for a in ADVICE for p in rng.sample(ADVICE_PHRASES, 2)]
    out += [f"Write a {lang} function that {t}." for t in base.EVERYDAY_TASKS for lang in rng.sample(LANGUAGES, 3)]
    out += [f"What is the difference between {p}?" for p in PAIRS]
    out += [t.format(s=s) for s in SENTENCES for t in REWRITES]
    for _ in range(200):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        out.append(rng.choice([f"What is {a} times {b}? Show the steps.", f"Solve for x: {a}x + {b} = {a * 3 + b}.",
                               f"What is {a}% of {b * 10}?", f"Is {a * b + 1} a prime number? Explain."]))
    out = list(dict.fromkeys(out))
    rng.shuffle(out)
    return (heldout or Heldout()).keep(out)


def code_windows(n: int, seed: int = 0, lines: int = 14, heldout: Heldout | None = None) -> list[tuple[str, str]]:
    """(file, text) for up to n windows of `lines` lines of training-split standard-library files, two windows
    a file at most (its start and a seeded later line), held-out and bench files never."""
    if n <= 0:
        return []
    root, rng, held = stdlib_root(), random.Random(seed), heldout or Heldout()
    skip = bench_sources()
    files = [f for f in list_files(root) if not is_heldout(f) and f not in skip]
    rng.shuffle(files)
    out: list[tuple[str, str]] = []
    for rel in files:
        text = read_text(root, rel) or ""
        rows = text.splitlines(keepends=True)
        starts = [0] + ([rng.randrange(lines, len(rows) - lines)] if len(rows) > 3 * lines else [])
        for s in starts:
            window = "".join(rows[s:s + lines])
            if 200 <= len(window) <= 1200 and held.why(window) is None:
                out.append((rel, window))
        if len(out) >= n:
            break
    return out[:n]


# the model writes the user's turn: its chat template up to "<|im_start|>user\n", then one of these openers
# (empty = none), sampled at ASK_TEMPERATURE / ASK_TOP_P with a seed per request
OPENERS = ["", "", "", "Can you", "How do I", "Write a", "Explain", "What is", "Why", "Give me", "I need help with",
           "Help me", "Write a Python", "What are some", "How does", "Tell me", "Create a", "Could you", "List",
           "What is the difference between", "Summarize", "Describe", "Suggest", "I am learning", "Is it true that"]
ASK_TEMPERATURE, ASK_TOP_P = 0.9, 0.95


def ask_prefix(system: str, opener: str) -> str:
    """The chat-template text after which the model writes a user request (SmolLM2's ChatML)."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{opener}".rstrip(" ")


def clean_asked(text: str) -> str | None:
    """A model-written request as a request, or None when unusable (too short or long, template tokens)."""
    text = text.split("<|im_end|>")[0].strip()
    if "<|" in text or not 12 <= len(text) <= 400 or len(_words(text)) < 3:
        return None
    return text


def dedupe_key(text: str) -> str:
    return " ".join(_words(text))
