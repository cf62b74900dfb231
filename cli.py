"""The ``atlas`` command line: ingest a corpus, list runs and queries, run named analyses and SQL."""

from __future__ import annotations

from pathlib import Path

import click
import duckdb
import polars as pl
import pyarrow.parquet as pq

from atlas.catalogue import Entry, entries, resolve, run_entry
from atlas.cli_options import format_option, out_option, store_at, store_option
from atlas.errors import AtlasError
from atlas.output import emit
from atlas.store import table_schemas
from atlas.tasks.commands import TASK_COMMANDS

_store = store_at  # the store named by --store or $ATLAS_STORE


class AtlasGroup(click.Group):
    """Turns user errors into one-line messages and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except AtlasError as exc:
            raise click.ClickException(str(exc)) from None
        except (OSError, duckdb.Error) as exc:  # a file that cannot be read or written, a locked store
            raise click.ClickException(str(exc).strip().splitlines()[0]) from None
        except KeyboardInterrupt:
            click.echo("interrupted: re-run the same command to resume", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(cls=AtlasGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attention-atlas")
def cli() -> None:
    """Attention Atlas: what do this model's attention heads do?

    Run an encoder over an annotated corpus into a store of Parquet tables registered in DuckDB,
    then ask the papers' analyses as named queries.
    """


@cli.command()
@click.option("--corpus", required=True, type=click.Path(path_type=Path), help="Corpus file (see --format).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["conllu", "glue", "framenet", "text"]),
    default="conllu",
    show_default=True,
    help="glue: a GLUE TSV file of --task, words and dependencies by spaCy, pairs as [CLS] a [SEP] b [SEP]; "
    "framenet: FrameNet 1.5 lexical-unit exemplars (lu/*.xml, their folder or .tar.gz), Kovaleva et al.'s filters; "
    "text: WikiText raw or plain text, an article's paragraphs two by two as [CLS] a [SEP] b [SEP] (Clark et al.'s "
    "Wikipedia segments), words and dependencies by spaCy.",
)
@click.option("--task", default=None, help="The GLUE task of a --format glue file (SST-2, MRPC, RTE, STS-B, ...).")
@click.option("--model", default=None, help="HF model id or local path (default: embedded all-MiniLM-L6-v2).")
@click.option("--random-init", is_flag=True, help="Same config with fresh random weights (random baseline).")
@click.option("--seed", default=0, show_default=True, help="Seed of --random-init.")
@click.option(
    "--sample", type=click.IntRange(min=1), default=None, help="--format text: draw N paragraph pairs at random."
)
@click.option(
    "--sample-seed", default=0, show_default=True, help="--format text: seed of --sample's draw and of the truncation."
)
@click.option(
    "--kept-mass",
    default=0.9,
    show_default=True,
    type=float,
    help="Per attention row, keep the largest weights until this mass is reached.",
)
@click.option("--dense", is_flag=True, help="Keep every attention weight (exact; larger store).")
@click.option(
    "--max-length",
    type=int,
    default=None,
    help="Longest input in word pieces (default: the model's); longer sentences are skipped (--format text: a "
    "longer pair loses words at its ends as Clark et al.'s code cuts it, recorded in examples.sent_ids).",
)
@click.option(
    "--pack",
    type=click.Choice(["none", "pair", "window"]),
    default=None,
    help="none (default): one sentence per input; pair: [CLS] a [SEP] b [SEP]; window: fill up to "
    "--max-length. A GLUE file is always one example per input (pair for two-text tasks).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@store_option
def ingest(
    corpus: Path,
    fmt: str,
    task: str | None,
    model: str | None,
    random_init: bool,
    seed: int,
    sample: int | None,
    sample_seed: int,
    kept_mass: float,
    dense: bool,
    max_length: int | None,
    pack: str | None,
    quiet: bool,
    store_path: str | None,
) -> None:
    """Run a model over a corpus and add the run to the store (resumes if interrupted)."""
    from ingest.model import load_model
    from ingest.pipeline import Settings, check_corpus
    from ingest.pipeline import ingest as run_ingest

    store = _store(store_path)
    if fmt == "glue":
        from atlas.tasks.glue import task_spec

        if pack is not None:
            raise AtlasError("--pack: a GLUE file is read one example per input; leave --pack out")
        pack = "pair" if task and task_spec(task).text_b else "none"
    if fmt == "framenet" and pack not in (None, "none"):
        raise AtlasError("--pack: FrameNet sentences are read one per input; leave --pack out")
    if fmt == "text":
        if pack not in (None, "pair"):
            raise AtlasError("--pack: a text file is read as paragraph pairs; leave --pack out")
        pack = "pair"
    checked = check_corpus(corpus, fmt, task, sample, sample_seed)  # fail on bad input before loading anything
    lm = load_model(model, random_init=random_init, seed=seed)
    settings = Settings(kept_mass=None if dense else kept_mass, max_length=max_length, pack=pack or "none")
    result = run_ingest(checked, store, lm, settings, progress=not quiet)
    if result.already_present:
        click.echo(f"run {result.run_id} is already in {store.root}; nothing to do")
    else:
        click.echo(
            f"run {result.run_id}: {result.n_examples} inputs, {result.n_skipped} skipped as longer than "
            f"--max-length, {result.n_edges:,} attention edges -> {store.root}"
        )
        if fmt == "text":
            cut = "len(list_filter(sent_ids, s -> contains(s, ':'))) > 0"  # LINE:FIRST-LAST/N: words cut
            sql = f"SELECT count(*) FILTER (WHERE {cut}) FROM examples WHERE run_id = ?"
            n_cut = store.connect().execute(sql, [result.run_id]).fetchone()[0]
            left_out = checked.n_sentences // 2 - result.n_examples
            click.echo(
                f"{n_cut} of the {result.n_examples} pairs cut to --max-length (kept words in examples.sent_ids); "
                f"{left_out} left out (a paragraph would lose every word)"
            )


@cli.command()
@store_option
@format_option
def runs(store_path: str | None, fmt: str) -> None:
    """List the runs in the store."""
    store = _store(store_path)
    con = store.connect()
    df = con.execute(
        "SELECT run_id, model, random_init, corpus, pack, kept_mass, n_examples, n_skipped, n_edges, created_at "
        "FROM runs ORDER BY created_at"
    ).pl()
    emit(df, fmt, None)
    for run_id in store.unfinished_runs():
        click.echo(f"unfinished (interrupted) ingest: {run_id}; re-run the same 'atlas ingest' to resume", err=True)


@cli.command()
@format_option
def queries(fmt: str) -> None:
    """List the analysis catalogue."""
    df = pl.DataFrame(
        {
            "name": [e.name for e in entries()],
            "aliases": [", ".join(e.aliases) for e in entries()],
            "paper": [e.paper for e in entries()],
            "parameters": [", ".join(f"{p.name}={p.default}" for p in e.parameters) for e in entries()],
        }
    )
    emit(df, fmt, None)


def _params(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AtlasError(f"--param '{item}': expected NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


@cli.command()
@click.argument("phrase")
@click.option("--run", "run_id", default=None, help="Run id (default: the latest run).")
@click.option("--param", "params", multiple=True, help="NAME=VALUE for a parameter of the query.")
@click.option("--describe", is_flag=True, help="Show the entry's description and SQL instead of running it.")
@store_option
@format_option
@out_option
def query(
    phrase: str,
    run_id: str | None,
    params: tuple[str, ...],
    describe: bool,
    store_path: str | None,
    fmt: str,
    out: Path | None,
) -> None:
    """Run a catalogue entry named by PHRASE (a name, an alias or close words)."""
    if describe:
        entry = resolve(phrase)
        click.echo(f"{entry.name}\n{entry.paper}\n\n{entry.description}\n\n{entry.sql}")
        return
    entry, df = _run_query(phrase, run_id, params, store_path)
    emit(df, fmt, out)


def _run_query(
    phrase: str, run_id: str | None, params: tuple[str, ...], store_path: str | None
) -> tuple[Entry, pl.DataFrame]:
    entry = resolve(phrase)
    values = _params(params)
    store = _store(store_path)
    con = store.connect()
    if any(p.name == "run" for p in entry.parameters):
        values["run"] = run_id or values.get("run") or store.latest_run(con)
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [values["run"]]).fetchone()[0] == 0:
            raise AtlasError(f"--run '{values['run']}': no such run in {store.root} (see 'atlas runs')")
    click.echo(f"{entry.name} ({entry.paper})", err=True)
    return entry, run_entry(con, entry, entry.bind(values))


@cli.command(name="plot")
@click.argument("phrase")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="PNG file.")
@click.option("--run", "run_id", default=None, help="Run id (default: the latest run).")
@click.option("--param", "params", multiple=True, help="NAME=VALUE for a parameter of the query.")
@store_option
def plot_command(phrase: str, out: Path, run_id: str | None, params: tuple[str, ...], store_path: str | None) -> None:
    """Draw the paper-style figure of a catalogue entry (PNG)."""
    from atlas.plot import plot

    entry, df = _run_query(phrase, run_id, params, store_path)
    plot(entry, df, out)
    click.echo(f"wrote {out}", err=True)


@cli.command()
@click.option("--run", "run_id", default=None, help="Run id (default: the latest run).")
@click.option("--examples", default=500, show_default=True, help="Inputs to average over (the first ones).")
@click.option("--clusters", default=6, show_default=True, help="Number of head clusters.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@store_option
def distances(run_id: str | None, examples: int, clusters: int, quiet: bool, store_path: str | None) -> None:
    """Compute head distances (JS divergence, MDS, clusters) for a run and add them to the store."""
    from atlas.distances import compute

    store = _store(store_path)
    if run_id is None:
        con = store.connect()
        run_id = store.latest_run(con)
        con.close()
    compute(store, run_id, examples, clusters, progress=not quiet)
    click.echo(f"head distances of {run_id} written; see 'atlas query \"head distances\"'", err=True)


@cli.command()
@click.option("--train", "train_run", required=True, help="Run whose sentences the probes are trained on.")
@click.option("--eval", "eval_run", required=True, help="Run the probes are scored on (same model).")
@click.option("--epochs", default=5, show_default=True, type=click.IntRange(min=1), help="Passes over the train run.")
@click.option("--seed", default=0, show_default=True, help="Seed of initialisation and batch order.")
@click.option("--train-limit", type=click.IntRange(min=1), default=None, help="Only the first N train inputs.")
@click.option("--eval-limit", type=click.IntRange(min=1), default=None, help="Only the first N eval inputs.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@store_option
@format_option
def probe(
    train_run: str,
    eval_run: str,
    epochs: int,
    seed: int,
    train_limit: int | None,
    eval_limit: int | None,
    quiet: bool,
    store_path: str | None,
    fmt: str,
) -> None:
    """Train the attention probes of Clark et al. (Section 5) on one run, score UAS on another."""
    from atlas.probe import Settings, run

    settings = Settings(epochs=epochs, seed=seed, train_limit=train_limit, eval_limit=eval_limit)
    results = run(_store(store_path), train_run, eval_run, settings, progress=not quiet)
    emit(pl.DataFrame(results), fmt, None)
    click.echo("written; see 'atlas query \"probe results\"'", err=True)


@cli.command()
@click.option("--run", "run_id", default=None, help="Run id (default: the latest run).")
@click.option(
    "--labels",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="CSV of hand labels (example_id, layer, head, pattern): train the paper's CNN instead of the rule.",
)
@store_option
def patterns(run_id: str | None, labels: Path | None, store_path: str | None) -> None:
    """Class every (input, head) map into Kovaleva et al.'s five patterns (rule in 'atlas/patterns.py')."""
    from atlas.patterns import THRESHOLDS, classify

    store = _store(store_path)
    if run_id is None:
        con = store.connect()
        run_id = store.latest_run(con)
        con.close()
    if labels is not None:
        from atlas.pattern_cnn import train_and_classify

        f1, n = train_and_classify(store, run_id, labels)
        click.echo(f"CNN: cross-validated macro F1 {f1:.1f} on the labels; {n:,} maps of {run_id} classed")
        return
    n = classify(store, run_id)
    rule = ", ".join(f"{k} {v}" for k, v in THRESHOLDS.items())
    click.echo(f"{n:,} maps of {run_id} classed (thresholds: {rule}); see 'atlas query \"pattern shares\"'")


@cli.command()
@click.argument("statement")
@store_option
@format_option
@out_option
def sql(statement: str, store_path: str | None, fmt: str, out: Path | None) -> None:
    """Run read-only SQL over the store (only SELECT statements are accepted)."""
    con = _store(store_path).connect(sandboxed=True)
    try:
        parsed = con.extract_statements(statement)
    except duckdb.Error as exc:
        raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None
    if len(parsed) != 1:
        raise AtlasError(f"sql: expected one statement, found {len(parsed)}")
    if parsed[0].type != duckdb.StatementType.SELECT:
        raise AtlasError(f"sql: only read-only SELECT statements are accepted, not {parsed[0].type.name}")
    try:
        df = con.execute(statement).pl()
    except duckdb.Error as exc:
        raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None
    emit(df, fmt, out)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Output folder.")
@click.option("--run", "run_id", default=None, help="Only this run (default: every run).")
@store_option
def export(fmt: str, out: Path, run_id: str | None, store_path: str | None) -> None:
    """Write every table of the store as one Parquet file per table."""
    con = _store(store_path).connect()
    out.mkdir(parents=True, exist_ok=True)
    where, args = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    for name in table_schemas():
        reader = con.execute(f"SELECT * FROM {name} {where}", args).to_arrow_reader()
        tmp = out / f".{name}.parquet.tmp"
        with pq.ParquetWriter(tmp, reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
        tmp.replace(out / f"{name}.{fmt}")
        click.echo(f"{name}: {pq.ParquetFile(out / f'{name}.{fmt}').metadata.num_rows:,} rows", err=True)


def main() -> None:
    cli(prog_name="atlas")


if __name__ == "__main__":
    main()


for _command in TASK_COMMANDS:
    cli.add_command(_command)
