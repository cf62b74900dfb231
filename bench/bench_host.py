"""The host's cost per attention row, this checkout against another version of atlas, measured side by side in one run.

    python bench/bench_host.py EWT.conllu GUM.conllu [--before REV] [--turns N] [--setting NAME=VALUE]
        [--without TABLE]

The corpora: UD EWT dev one sentence per input, and UD GUM dev in 128-piece windows (``--pack window --max-length
128``), the embedded model. ``--before`` (default ``HEAD~1``): the version to measure against, taken from this
repository with ``git archive``. Each ingest runs in a process of its own, the two versions by turns (``--turns``
each, default 3), after a warm-up ingest in that process. An ingest is run twice with its stages timed
(``atlas.ingestion.stages``): once with the stages' clock each thread's CPU time (what a stage costs a core, whatever
else runs beside it), once with the wall clock (the stage table of ``bench/bench_device.py``, which counts the time a
thread waits for a core too). Prints per corpus and version the medians, per attention row (one per token, layer and
head), of the host's own stages (reading and aligning, tables, writing: thread seconds), each version's ingest wall
seconds, and the ratios of this checkout to the version before; the goal is 0.5 of the host's stages on both corpora.

What a lighter store would cost, against the same version before at its defaults: ``--setting`` (repeated) ingests this
checkout with a setting of ``Settings`` other than its default (``max_edges=2``: at most two edges per attention row;
``kept_mass=0.8``), ``--without`` (repeated) leaves an attention table out of this checkout's files (``word_rows``:
its rows computed as ever, not made into tables nor written; a measure of what they cost, not a store to use).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
HOST_STAGES = ("reading and aligning", "tables", "writing")
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
CORPORA = ("EWT dev, one sentence per input", "GUM dev, 128-piece windows")
PLAIN = {"settings": {}, "without": []}  # a lighter store's changes (--setting, --without): none
SETTINGS = ("kept_mass", "max_edges", "text", "word_rows", "norms", "rollout")  # the settings --setting may change


def child(tree: Path, corpus: Path, pack: str, max_length: int | None, lighter: dict) -> None:
    """In a process of its own: one warm-up ingest of ``corpus`` by the atlas at ``tree``, then one ingest per clock
    with its stages timed; prints their stage seconds and the run's attention rows as JSON. ``lighter``: the settings
    changed and the tables not written (``--setting``, ``--without``)."""

    # the atlas of ``tree``, not the one installed in this environment (an editable install finds its own checkout)
    def editable(finder: object) -> bool:
        return (finder if isinstance(finder, type) else type(finder)).__module__.startswith("__editable__")

    sys.meta_path[:] = [f for f in sys.meta_path if not editable(f)]
    sys.path.insert(0, str(tree))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from atlas.ingestion import stages
    from atlas.ingestion.corpus import check_corpus
    from atlas.ingestion.pipeline import Settings, ingest
    from atlas.model.load import load_model
    from atlas.store import Store

    assert Path(stages.__file__).resolve().is_relative_to(tree.resolve()), stages.__file__
    lm = load_model(None)
    settings = Settings(pack=pack, max_length=max_length or lm.max_positions, device="cpu", dtype="float32",
                        **lighter["settings"])  # fmt: skip
    if lighter["without"]:  # the tables the pipeline makes of a chunk's rows and writes
        from atlas.ingestion import pipeline

        pipeline.WRITE_ORDER = tuple(name for name in pipeline.WRITE_ORDER if name not in lighter["without"])
    checked = check_corpus(corpus, "conllu")
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as work:
        ingest(checked, Store(Path(work) / "warm-up"), lm, settings, progress=False)
        for name, clock in CLOCKS.items():
            real = stages.time
            stages.time = type("Clock", (), {"perf_counter": staticmethod(clock)})  # the stages' clock
            try:
                with stages.timing() as seconds:
                    start = time.perf_counter()
                    result = ingest(checked, Store(Path(work) / name), lm, settings, progress=False)
                    out[f"{name} ingest"] = time.perf_counter() - start
            finally:
                stages.time = real
            out[name] = {stage: seconds.get(stage, 0.0) for stage in HOST_STAGES}
        con = Store(Path(work) / "cpu").connect()
        (tokens,) = con.execute("SELECT n_tokens FROM runs WHERE run_id = ?", [result.run_id]).fetchone()
        con.close()
    out["rows"] = tokens * lm.n_layers * lm.n_heads
    print(json.dumps(out))


def export(rev: str, into: Path) -> Path:
    """The tree of commit ``rev`` of this repository, in ``into``."""
    archive = subprocess.run(["git", "archive", rev], cwd=HERE, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(tree: Path, corpus: Path, pack: str, max_length: int | None, lighter: dict) -> dict:
    command = [sys.executable, __file__, "--child", str(tree), str(corpus), "--pack", pack]
    command += ["--lighter", json.dumps(lighter)] + (["--max-length", str(max_length)] if max_length else [])
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", type=Path, nargs="*")
    parser.add_argument("--before", default="HEAD~1", help="the version measured against (a git revision)")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="this checkout ingests with this setting (e.g. max_edges=2; repeat for more)",
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="TABLE",
        help="this checkout leaves this attention table out of its files (repeat for more)",
    )
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lighter", default=json.dumps(PLAIN), help=argparse.SUPPRESS)
    parser.add_argument("--pack", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--max-length", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.corpora[0], args.pack, args.max_length, json.loads(args.lighter))
        return
    if len(args.corpora) != 2:
        parser.error("give UD EWT dev and UD GUM dev (CoNLL-U files)")
    from atlas.ingestion.write import ATTENTION_TABLES  # this checkout's

    lighter = {"settings": dict(_setting(parser, text) for text in args.setting), "without": args.without}
    unknown = set(args.without) - set(ATTENTION_TABLES)
    if unknown:
        parser.error(f"--without {sorted(unknown)[0]}: expected one of {', '.join(ATTENTION_TABLES)}")
    revision = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=HERE, check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="atlas-bench-host-"))
    try:
        trees = {"before": export(args.before, work / "before"), "this": HERE}
        setups = [(args.corpora[0], "none", None), (args.corpora[1], "window", 128)]
        runs: dict[tuple[int, str], list[dict]] = {}
        for turn in range(args.turns):
            for version in ("before", "this") if turn % 2 == 0 else ("this", "before"):
                for k, setup in enumerate(setups):
                    runs.setdefault((k, version), []).append(
                        measure(trees[version], *setup, lighter if version == "this" else PLAIN)
                    )
                    print(f"turn {turn + 1}/{args.turns}: {version}, {CORPORA[k]}", file=sys.stderr)
        print(f"# the host's own stages per attention row, ns (medians of {args.turns} ingests each, by turns): this "
              f"checkout against {revision}; {os.cpu_count()} CPU cores")  # fmt: skip
        if args.setting or args.without:
            print(f"# this checkout with {', '.join(args.setting) or 'its default settings'}; tables not written: "
                  f"{', '.join(args.without) or 'none'}")  # fmt: skip
        for clock in CLOCKS:
            what = "each thread's CPU time" if clock == "cpu" else "the wall clock, per thread"
            print(f"\n## stages timed by {what}")
            stages = " | ".join(HOST_STAGES)
            print(f"| corpus | version | {stages} | host stages | ingest s | host stages: this / before |")
            print("|---|---|---|---|---|---|---|---|")
            for k, corpus in enumerate(CORPORA):
                totals = {}
                for version in ("before", "this"):
                    found = runs[(k, version)]
                    per_row = {s: statistics.median(r[clock][s] / r["rows"] * 1e9 for r in found) for s in HOST_STAGES}
                    totals[version] = statistics.median(sum(r[clock].values()) / r["rows"] * 1e9 for r in found)
                    wall = statistics.median(r[f"{clock} ingest"] for r in found)
                    ratio = f"**{totals['this'] / totals['before']:.2f}**" if version == "this" else ""
                    label = revision if version == "before" else "this"
                    cells = " | ".join(f"{per_row[s]:.0f}" for s in HOST_STAGES)
                    print(f"| {corpus} | {label} | {cells} | {totals[version]:.0f} | {wall:.2f} | {ratio} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _setting(parser: argparse.ArgumentParser, text: str) -> tuple[str, object]:
    """``--setting NAME=VALUE`` as a field of ``Settings`` and its value (a JSON number, null, or else the text)."""
    name, _, value = text.partition("=")
    if name not in SETTINGS or not value:
        parser.error(f"--setting {text!r}: expected NAME=VALUE, NAME one of {', '.join(SETTINGS)}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


if __name__ == "__main__":
    main()
