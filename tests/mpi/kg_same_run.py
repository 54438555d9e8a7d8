"""kg_same_run.py REF RUN N: the RL run in folder RUN (one step, judged by
KernelGym) wrote one metrics.jsonl row whose rewards and rates equal those
of the reference run REF, and a rollouts.jsonl of N rows equal to REF's row
for row. Prints how many answers reached the judge (at least one must).
Used by the mpi tests that compare a distributed KernelGym run with world 1."""
import json
import sys


def rows(run, name):
    with open(f"{run}/{name}") as f:
        return [json.loads(line) for line in f]


def main(ref, run, n):
    a, b = rows(ref, "metrics.jsonl"), rows(run, "metrics.jsonl")
    assert [r["step"] for r in b] == [1], f"{run}/metrics.jsonl has steps {[r['step'] for r in b]}"
    for k in ("reward_mean", "reward_mean_turn1", "reward_mean_turn2", "correct_rate", "compile_error_rate",
              "no_code_rate", "response_len_mean"):
        assert a[0][k] == b[0][k], f"{k}: {b[0][k]} in {run}, {a[0][k]} in {ref}"
    ra, rb = rows(ref, "rollouts.jsonl"), rows(run, "rollouts.jsonl")
    assert len(rb) == n, f"{run}/rollouts.jsonl has {len(rb)} rows, not {n}"
    assert ra == rb, f"the rollouts of {run} differ from those of {ref}"
    judged = sum(t["outcome"] != "no_code" for r in rb for t in r["turns"])
    assert judged > 0, "no answer reached KernelGym"
    print(judged)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
