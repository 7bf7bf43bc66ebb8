"""Does learning suffer from asynchronous rollouts? The quickstart's reward curve, synchronous
against ``training.max_staleness: k``, over several seeds, paired by seed.

    python bench/async_curves.py --seeds 8 --staleness 1

Trains the quickstart (its tiny model built into a temp dir) for its 200 steps once per seed in
each mode. Seed ``s`` gives both runs the same prompt order and the same sampling seeds, so the
two differ only by which weights sampled each step: the per-seed difference async - sync is
paired. For the area under the curve (the mean reward over all steps) and the mean of the last
20 steps, prints the mean paired difference with its 95% interval (Student's t over seeds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from async_rollouts import make_task, quickstart_sets, run  # noqa: E402
from vs_trl_curves import t_quantile  # noqa: E402


def curve(seed: int, k: int, task: tuple[Path, Path], out: Path) -> list[float]:
    sets = {**quickstart_sets(task), "training.seed": seed, "training.logging_steps": 50}
    return [m["reward"] for m in run("examples/quickstart.yaml", k, out, sets)]


def paired(diffs: list[float]) -> str:
    n = len(diffs)
    mean = statistics.mean(diffs)
    if n < 2:
        return f"{mean:+.4f} (one seed: no interval)"
    half = t_quantile(0.975, n - 1) * statistics.stdev(diffs) / n**0.5
    return f"{mean:+.4f}  95% CI [{mean - half:+.4f}, {mean + half:+.4f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--staleness", type=int, default=1)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp))
        for seed in range(args.seeds):
            sync = curve(seed, 0, task, Path(tmp) / f"sync{seed}")
            stale = curve(seed, args.staleness, task, Path(tmp) / f"async{seed}")
            rows.append((seed, sync, stale))
            gap = statistics.mean(stale) - statistics.mean(sync)
            print(f"seed {seed}: AUC sync {statistics.mean(sync):.4f}, async - sync {gap:+.4f}")
    print(f"quickstart, {args.seeds} seeds, max_staleness {args.staleness} against 0 (hf)")
    print(f"{'':>8}  {'sync':>7}  {'async':>7}  async - sync (paired by seed)")
    for name, cut in (("AUC", 0), ("last 20", -20)):
        s = [statistics.mean(r[1][cut:]) for r in rows]
        a = [statistics.mean(r[2][cut:]) for r in rows]
        diffs = [y - x for x, y in zip(s, a, strict=True)]
        print(f"{name:>8}  {statistics.mean(s):7.4f}  {statistics.mean(a):7.4f}  {paired(diffs)}")


if __name__ == "__main__":
    main()
