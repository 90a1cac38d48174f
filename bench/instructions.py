"""Instructions per env step of ``multi_run`` against the bare loop, counted by valgrind: the runner's work, free of noise.

``bench/overhead.py`` times what users wait for, and its ratios move by 0.02-0.04 with the host's phases. This
bench counts instead what the processor is asked to do: each variant of ``bench/overhead.py`` (the same agent, env
and call, at the same budgets) runs in a process of its own under ``valgrind --tool=cachegrind``, at two budgets;
the difference of the two processes' counts over the difference of their env steps is the variant's count per env
step, so the process's start, its imports and the run's set-up cancel out. What the counts do not cancel is
the work done once per stretch of wall time (the progress bars' refresh every 0.1 s, flushes every so many seconds):
under valgrind a step takes 25-50 times longer, longer still on a loaded host, so that work is counted many times
more often per step than it runs natively. Round 11's twenty-fifth stop saw it: at 64 sub-envs `EmptyCallBack` counted
-71 instructions per env step over the bare loop with the host's load at 4-5, +955 at 7-9 with ``--cache`` (twice
as slow again), the extra in the interpreter, the allocator and the streams' pickling. Take counts on a quiet host, both sides at the same load; with that,
a change of the runner's per-step work of well under 1% shows.

``tb`` is compared with the bare loop that hands its agent ``call_back=kept.append`` (``bare-logs``), as in
``bench/overhead.py``; the other variants with the plain bare loop.

What the columns are not: time. A count leaves out how fast the instructions run (cache misses, branch
mispredictions), which ``--cache`` simulates (valgrind's model of a first-level data cache and of a branch
predictor; ``--cache`` makes each process about twice as slow). Round 11 found with it that the runner's extra wall
time over the bare loop is mostly not extra instructions: at 64 sub-envs the call with ``EmptyCallBack`` asks for
no more instructions per env step than the bare loop, yet takes 6-8% longer (see ``bench/README.md``).

Needs valgrind (Debian: ``apt-get install valgrind``). A process runs 25-50 times slower under it: the default
budgets take about 5 minutes on two cores.

    python bench/instructions.py [--steps 1:10000:50000,64:64000:320000] [--variants bare,empty,tb] [--cache] [--env replay]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import overhead  # bench/overhead.py: the variants, the agent and the envs

DEFAULT_STEPS = "1:10000:50000,64:64000:320000"
VARIANTS = ("bare", "empty", "tb", "hook")
BARE_OF = {"tb": "bare-logs"}  # the bare loop a variant is compared with (the default: "bare")
EVENTS = {  # cachegrind's event -> the column's name
    "Ir": "instructions",
    "D1mr": "D1 read misses",
    "D1mw": "D1 write misses",
    "Bcm": "cond. branch mispredicts",
    "Bim": "indirect branch mispredicts",
}


def child(variant: str, num_envs: int, total_steps: int, env: str) -> None:
    """Run one variant once, in this process (what valgrind counts)."""
    overhead.ENV = env
    made = overhead.make_env(num_envs)
    with tempfile.TemporaryDirectory() as tmp:
        if variant in ("bare", "bare-logs"):
            overhead.bare_loop(made, total_steps, 0, keep_logs=variant == "bare-logs")
        else:
            overhead.trainer_run(made, total_steps, 0, variant, tmp)
    made.close()


def counts(variant: str, num_envs: int, total_steps: int, env: str, cache: bool) -> dict[str, int]:
    """Cachegrind's totals for one process running ``variant``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cachegrind.out"
        command = [
            "valgrind",
            "--tool=cachegrind",
            f"--cache-sim={'yes' if cache else 'no'}",
            f"--branch-sim={'yes' if cache else 'no'}",
            f"--cachegrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            variant,
            str(num_envs),
            str(total_steps),
            env,
        ]
        # one BLAS thread: OpenBLAS's idle threads spin, and valgrind counts their spinning
        environ = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, capture_output=True, text=True, env=environ, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        events: list[str] = []
        totals: list[int] = []
        for line in out.read_text().splitlines():
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                totals = [int(x) for x in line.split()[1:]]
        return dict(zip(events, totals))


def per_step(pairs: dict[tuple[str, int, int], dict[str, int]], variant: str, n: int, low: int, high: int) -> dict:
    """Each event's count per env step of ``variant``: the difference between its two budgets' processes."""
    small, large = pairs[(variant, n, low)], pairs[(variant, n, high)]
    return {event: (large[event] - small[event]) / (high - low) for event in large if event in EVENTS}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--steps", default=DEFAULT_STEPS, help="num_envs:small_budget:large_budget triples, comma-separated"
    )
    parser.add_argument("--variants", default="bare,empty,tb", help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--cache", action="store_true", help="also simulate the data cache and branch prediction")
    parser.add_argument("--env", choices=overhead.ENVS, default="cartpole", help="as in bench/overhead.py")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes under valgrind at once")
    parser.add_argument("--child", nargs=4, metavar=("VARIANT", "NUM_ENVS", "STEPS", "ENV"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, num_envs, total_steps, env = args.child
        child(variant, int(num_envs), int(total_steps), env)
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    variants = tuple(args.variants.split(","))
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    settings = [tuple(int(x) for x in triple.split(":")) for triple in args.steps.split(",")]
    needed = {BARE_OF.get(v, "bare") for v in variants} | set(variants)
    jobs = [(v, n, budget) for n, low, high in settings for v in sorted(needed) for budget in (low, high)]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {job: pool.submit(counts, *job, args.env, args.cache) for job in jobs}
        pairs = {job: future.result() for job, future in futures.items()}
    events = [event for event in EVENTS if event in next(iter(pairs.values()))]
    print(f"per env step (one transition of one sub-env), {args.env}; extra and ratio against the bare loop")
    print(f"{'num_envs':>8}  {'variant':>9}  " + "  ".join(f"{EVENTS[e]:>28}" for e in events))
    for n, low, high in settings:
        for variant in (v for v in variants if v != "bare"):
            mine = per_step(pairs, variant, n, low, high)
            bare = per_step(pairs, BARE_OF.get(variant, "bare"), n, low, high)
            cells = []
            for event in events:
                extra = mine[event] - bare[event]
                cells.append(f"{mine[event]:>10.0f} {extra:>+8.0f} {mine[event] / bare[event]:>6.3f}".rjust(28))
            print(f"{n:>8}  {variant:>9}  " + "  ".join(cells), flush=True)
        if "bare" in variants:
            bare = per_step(pairs, "bare", n, low, high)
            print(f"{n:>8}  {'bare':>9}  " + "  ".join(f"{bare[e]:>10.0f}".ljust(28) for e in events))


if __name__ == "__main__":
    main()
