#!/usr/bin/env bash
# Behaviour check for a refactor: run the CLI for every method (greedy and sampled) in a checkout of
# REV and in this working tree, then compare the traces step by step (times excepted).
#   bash scripts/compare_runs.sh REV        # e.g. the commit before a move of files
set -euo pipefail
rev=${1:?usage: compare_runs.sh REV}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
git -C "$here" worktree add -q "$tmp/old" "$rev"
trap 'git -C "$here" worktree remove --force "$tmp/old"' EXIT
runs() {  # $1 checkout, $2 output folder
  mkdir -p "$2"
  local p=$'def fibonacci(n):\n    '
  while read -r name args; do
    (cd "$1" && OMP_NUM_THREADS=1 python -m decoding generate --prompt "$p" --max-new-tokens 40 --json "$2/$name.json" $args >/dev/null 2>"$2/$name.err") \
      || echo "$name: the run failed in $1 ($(tail -n 1 "$2/$name.err"))" >&2
  done <<'RUNS'
greedy --method greedy
lookahead --method lookahead --window 3 --ngram 4 --guesses 3
prompt_lookup --method prompt_lookup
spec_chain --method speculative --draft-tokens 3
spec_tree --method speculative --tree 3,2,1
spec_staged --method speculative --staged
spec_budget --method speculative --tree-budget 8
jacobi --method jacobi --block 4
medusa --method medusa
eagle --method eagle
la_sample --method lookahead --temperature 0.8 --seed 3
spec_sample --method speculative --temperature 0.8 --seed 3 --tree 2,2
eagle_sample --method eagle --temperature 0.8 --seed 3
retrieval --method retrieval
retrieval_rest --method retrieval --datastore assets/datastore/smollm2
self_spec --method self_speculative
spec_self_sample --method self_speculative --temperature 0.8 --seed 3
ref_lookup --method prompt_lookup --reference constraints.txt
RUNS
}
runs "$tmp/old" "$tmp/a"
runs "$here" "$tmp/b"
python - "$tmp/a" "$tmp/b" <<'PY'
import json, sys
from pathlib import Path
a, b = Path(sys.argv[1]), Path(sys.argv[2])
def clean(step):
    return {k: ({i: v for i, v in x.items() if not i.endswith("_ms")} if k == "info" else x)
            for k, x in step.items() if k != "wall_ms"}
bad = 0
for f in sorted(a.glob("*.err")):
    if not f.with_suffix(".json").exists():
        bad += 1
        print(f"{f.stem:14s} FAILED in the old run")
for f in sorted(a.glob("*.json")):
    if not (b / f.name).exists():
        bad += 1
        print(f"{f.stem:14s} MISSING in the new run")
        continue
    x, y = json.loads(f.read_text()), json.loads((b / f.name).read_text())
    same = x["output_ids"] == y["output_ids"] and [clean(s) for s in x["steps"]] == [clean(s) for s in y["steps"]]
    bad += not same
    print(f"{f.stem:14s} {'identical' if same else 'DIFFERENT'} ({len(x['steps'])} steps)")
sys.exit(1 if bad else 0)
PY
