"""Plain-words explanations shown beside the live pictures, one per method (markdown)."""
from __future__ import annotations

COMMON = ("**Why extra tokens per step are nearly free.** Decoding one token reads every weight of the model "
          "from memory but does little arithmetic with it: the step is *memory-bound*. Checking 10 or 50 "
          "tokens in the same forward pass reads the same weights once, so it costs about the same time — "
          "until the step becomes compute-bound (see the roofline and *step latency vs query tokens* in the "
          "Profile tab). Every method here spends that spare compute on guesses and keeps only the guesses "
          "the model itself agrees with.")

EXPLAIN = {
    "greedy": (
        "### Greedy decoding\n"
        "One forward pass per new token: the model reads the text so far and picks its most likely next "
        "token. It is the baseline every other method is compared with — in greedy mode and fp32 they all "
        "return **exactly these tokens**, only in fewer steps (in bf16/fp16 a many-token step rounds "
        "differently, so a near-tie can flip: the race reports where).\n\n"
        "The **mask** view shows what each query token may attend to: here a single row (x0, the last "
        "accepted token) that sees the whole cache."),
    "lookahead": (
        "### Lookahead decoding\n"
        "Each step is **one** forward pass over three things at once (see the *window* and *pool* views):\n\n"
        "- **x0**, the last accepted token — the model's own next token always comes from here, so a step "
        "never gives less than plain decoding;\n"
        "- the **Jacobi window**: **W** columns × **N−1** levels of guessed future tokens. Each step every "
        "column is refined by one level (fixed-point iteration), and each column then yields an **N-gram** "
        "that goes into the pool;\n"
        "- up to **G** **candidates** from the **n-gram pool** whose first token is x0: the target verifies "
        "them in the same pass and the longest one that equals its own greedy choices is accepted.\n\n"
        "**W** = how many guesses run in parallel, **N** = how long each guessed n-gram is, **G** = how many "
        "pool candidates are checked per step. Window guesses give at most N tokens per step; n-grams that "
        "occurred in the prompt or the output are offered with up to 7 tokens of what followed them there "
        "(on a small model that is where most accepted guesses come from). Query tokens per step ≈ "
        "W(N−1) + G × candidate length: bigger is more hits but more compute; the *Sweep* tab shows the "
        "trade-off."),
    "prompt_lookup": (
        "### Prompt lookup\n"
        "Code and chat often repeat what is already in the text. Prompt lookup finds the last few tokens "
        "(up to **max n-gram**) earlier in the prompt or output and proposes what followed them there (up "
        "to **num tokens**). The model checks the copy in one forward pass and keeps the part that matches "
        "its own choices. No second model, no training — the *pool* view shows the matched key and the "
        "candidate copies.\n\n"
        "**Reference text** (reference lookup, Yang et al. 2023, *Inference with Reference*, LLMA): the same "
        "lookup also searches a text you paste under the prompt — a retrieved document, the file being edited — "
        "and copies up to 24 tokens from it per step (cyan in the text and the pool view). **Aggressive "
        "decoding** (Ge et al., *Lossless Acceleration for Seq2seq Generation with Aggressive Decoding*) is the "
        "special case where the reference is the input of an edit: most of the output *is* the input, so whole "
        "spans are accepted in one step and the model's own token replaces each typo. Try the edit example: "
        "20+ tokens per step where the input was right."),
    "speculative": (
        "### Speculative decoding\n"
        "A small **draft model** (same tokenizer) guesses ahead; the big **target** checks all guesses in "
        "one forward pass (see the *tree* view: orange = drafted, the path the target accepted, and the "
        "first rejected node).\n\n"
        "- **chain**: **K** draft tokens in a row, the target checks K+1 positions;\n"
        "- **tree**: **widths** per depth, e.g. `3,2,1` = 3 alternatives at depth 1, 2 under each at depth "
        "2, 1 under each at depth 3 — branching early catches the draft's 2nd and 3rd choices;\n"
        "- **budget**: the B most probable nodes by cumulative draft probability;\n"
        "- **staged**: a cheap n-gram model drafts for the draft model too (stage 2);\n"
        "- **draft cutoff**: a drafted token whose draft probability is below it is not extended, so a "
        "`3,2,1` tree drafts fewer than its 15 nodes when the draft is unsure; the tree view draws the "
        "pruned nodes faint with their probability.\n\n"
        "Greedy output equals the target's own greedy output; with sampling, accept/reject keeps the "
        "target's distribution exactly."),
    "jacobi": (
        "### Jacobi decoding\n"
        "Santilli et al. 2023 (*Accelerating Transformer Inference for Translation via Parallel Decoding*, "
        "arXiv 2305.10427): guess the next **K** tokens at once (**block**), run the whole block through the "
        "model in **one** forward pass, and replace every guess by the model's own choice at that position — "
        "a fixed-point (Jacobi) iteration. The guesses the model agrees with, from the left, are accepted plus "
        "its own next token, so the output is exactly greedy's; the rest of the updated block becomes the next "
        "guesses (the first guesses are prompt tokens).\n\n"
        "The *trajectory* view shows why it rarely pays on real models: a guess made from a wrong left context "
        "is usually wrong, so the block converges about one position per step (compression near 1.0). "
        "Run **lookahead** on the same prompt and compare its trajectory: lookahead keeps the n-grams its "
        "window produces and checks them later, which is where its 2x comes from."),
}


EXPLAIN["medusa"] = (
    "**Medusa** drafts with the target itself: small heads on its last hidden state guess the next tokens "
    "(head k: k tokens after the last accepted one, read through the target's own LM head). The best "
    "nodes of their top-k, by the product of the heads' probabilities, form a tree the target checks in one "
    "forward. The tree view labels each node with its head and rank; greedy output equals the target's own.")
EXPLAIN["eagle"] = (
    "**EAGLE** drafts at the feature level: a one-layer head reads [next token's embedding; the target's "
    "hidden state] and predicts the next hidden state, token by token, growing a tree of the most probable "
    "paths (EAGLE-2). The target checks the whole tree in one forward; greedy output equals its own.")


def explain(method: str) -> str:
    return EXPLAIN.get(method, "") + "\n\n" + COMMON
