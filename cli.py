"""The ``atlas`` command line: ingest a corpus, list runs and queries, run named analyses and SQL."""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import click
import duckdb

from atlas import api
from atlas.cli_look import look_command
from atlas.cli_options import (
    FilePath,
    bad_value,
    file_format_option,
    format_option,
    limit_option,
    numbers,
    out_option,
    quiet_option,
    run_option,
    single_value,
    store_option,
)
from atlas.cli_serve import serve
from atlas.cli_tasks import TASK_COMMANDS
from atlas.errors import AtlasError, arg, note_cli_text
from atlas.output import check_output, emit, terminal_width

# the API's parameters whose option is not '--' and the name with dashes (see AtlasError.cli_text); 'runs[0]' is
# the first of the runs compared (the CLI's --run), 'heads=False' and 'layers=False' the flags that turn them off
FLAGS = {
    "train_run": "--train",
    "eval_run": "--eval",
    "runs": "--compare",
    "runs[0]": "--run",
    "figure": "--out",
    "master": "--spark-master",
    "heads=False": "--no-heads",
    "layers=False": "--no-layers",
}


class AtlasGroup(click.Group):
    """Turns user errors into one-line messages and a non-zero exit, never a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for given in args:  # bytes that are not UTF-8 (the shell's argv) reach no store, path or SQL
            try:
                given.encode()
            except UnicodeEncodeError:
                shown = given.encode(errors="surrogateescape").decode(errors="backslashreplace")
                raise click.ClickException(f"'{shown}': not UTF-8 text (the atlas reads arguments as UTF-8)") from None
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:  # 'atlas' alone: the help
            raise
        except click.UsageError as exc:  # atlas --no-such-option
            raise click.ClickException(_usage(exc)) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except AtlasError as exc:
            raise click.ClickException(exc.cli_text(FLAGS)) from None
        except click.BadParameter as exc:  # a value click refused (a number out of range, not a number, ...)
            raise click.ClickException(bad_value(exc)) from None
        except click.UsageError as exc:  # a command or an option that does not exist, an option without its value
            sub = ctx.invoked_subcommand
            raise click.ClickException(_usage(exc, f"{ctx.command_path} {sub}" if sub else ctx.command_path)) from None
        except BrokenPipeError:  # the reader of the output stopped early (atlas sql ... | head)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None
        except MemoryError as exc:  # asked for more than the machine has (a count of inputs, a length)
            raise click.ClickException(f"out of memory ({str(exc).strip().splitlines()[0] or 'MemoryError'})") from None
        except (OSError, duckdb.Error) as exc:  # a file that cannot be read or written, a locked store
            raise click.ClickException(str(exc).strip().splitlines()[0]) from None
        except KeyboardInterrupt:
            click.echo("interrupted: re-run the same command to resume", err=True)
            raise click.exceptions.Exit(130) from None


def _usage(exc: click.UsageError, command: str = "atlas") -> str:
    """Click's refusal of a command line, on one line (not the usage and a hint on three): 'No such command
    'x' (see 'atlas --help')'; ``command``: the command it refused where click does not say (an option without its
    value)."""
    return f"{exc.format_message().rstrip('.')} (see '{exc.ctx.command_path if exc.ctx else command} --help')"


@click.group(cls=AtlasGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attention-atlas")
def cli() -> None:
    """Attention Atlas: what do this model's attention heads do?

    Run a Hugging Face encoder or decoder over an annotated corpus into a store of Parquet tables
    registered in DuckDB, then ask the papers' analyses as named queries.
    """


@cli.command()
@click.option("--corpus", type=FilePath(), default=None, help="Corpus file (see --format; none for repeated).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(api.FORMATS),
    default=api.DEFAULT_FORMAT,
    show_default=True,
    help=api.FORMAT_HELP,
)
@click.option("--task", default=None, help="The GLUE task of a --format glue file (SST-2, MRPC, RTE, STS-B, ...).")
@click.option("--model", default=None, help="HF model id or local path (default: embedded all-MiniLM-L6-v2).")
@click.option("--random-init", is_flag=True, help="Same config with fresh random weights (random baseline).")
@click.option(
    "--config",
    "config",
    metavar="KEY=VALUE",
    multiple=True,
    help="--random-init: set a key of the model's config, the value as JSON, else a string (repeatable; e.g. "
    "--config num_hidden_layers=4 --config num_attention_heads=8).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of --random-init.")
@click.option(
    "--sample", type=click.IntRange(min=1), default=None, help="--format text: draw N paragraph pairs at random."
)
@click.option(
    "--sample-seed",
    default=0,
    show_default=True,
    help="--format text: seed of --sample's draw and of the truncation; --format repeated: seed of the tokens' draw.",
)
@click.option(
    "--length", type=click.IntRange(min=1), default=None, help="--format repeated: token ids drawn per sequence [50]."
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="--format repeated: sequences [10].")
@click.option(
    "--haystack",
    default=None,
    help="--format needle: the haystack, a text file or 'random' (drawn from the model's vocabulary) [the shipped "
    "WikiText-103 sample].",
)
@click.option(
    "--lengths", default=None, help="--format needle: context lengths in pieces, separated by commas (64,128)."
)
@click.option(
    "--depths",
    default=None,
    help="--format needle: where the needle goes, in percent of the context, separated by commas "
    "[0,11,22,33,44,56,67,78,89,100].",
)
@click.option("--needle", default=None, help="--format needle: the needle's text [Wu et al.'s first needle].")
@click.option("--question", default=None, help="--format needle: the question asked about --needle.")
@click.option(
    "--kept-mass",
    default=0.9,
    show_default=True,
    type=float,
    help="Per attention row, keep the largest weights until this mass is reached.",
)
@click.option(
    "--max-edges",
    type=click.IntRange(min=1),
    default=None,
    help="Per attention row, keep at most this many weights, beside --kept-mass [6].",
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
    help="none (default): one sentence per input; pair: two sentences, in the tokenizer's template for a pair ([CLS] a "
    "[SEP] b [SEP] for BERT); window: fill up to "
    "--max-length. A GLUE file is always one example per input (pair for two-text tasks).",
)
@click.option(
    "--text",
    type=click.Choice(["written", "words"]),
    default="written",
    show_default=True,
    help="What the model reads of a sentence. written: the text as written (CoNLL-U: its '# text', else its words "
    "joined as SpaceAfter=No says; GLUE and text files: the raw strings), the words placed on its characters (a "
    "piece belongs to the word of its first character; a word may get none); words: the words joined by single "
    "spaces (Clark et al.'s pre-tokenized input).",
)
@click.option(
    "--word-rows",
    type=click.Choice(["mean", "first"]),
    default="mean",
    show_default=True,
    help="A word of several pieces in word_rows: mean: the mean of its pieces' attention rows (Clark et al.'s "
    "paper); first: its first piece's row (their released code's default).",
)
@click.option(
    "--norms",
    is_flag=True,
    help="Also the norm-based statistics (Kobayashi et al. 2020): the norm of what a head passes on from each token "
    "(attn_rows.value_norm) and, per input and head, the norm-weighted masses of its rows (table head_norms).",
)
@click.option(
    "--rollout",
    type=click.Choice(["none", "cls", "last", "all"]),
    default="none",
    show_default=True,
    help="Keep rows of the attention rollout (Abnar & Zuidema 2020) in table rollout: cls: each input's [CLS]/BOS "
    "row; last: its last token's; all: every row, kept as the edges are.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: this process runs the model; ray: Ray Data actors run it, chunk by chunk (pip install "
    "'attention-atlas[ray]'; every node must see the store at the same path). The store is the same.",
)
@click.option(
    "--ray-address", default=None, help="--engine ray: a running Ray cluster's address (default: a local instance)."
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="--engine ray: actors, each holding the model [2]."
)
@click.option(
    "--gpus-per-worker", type=click.FloatRange(min=0), default=None, help="--engine ray: GPUs each actor claims [0]."
)
@click.option(
    "--device",
    type=click.Choice(api.DEVICES),
    default="auto",
    show_default=True,
    help="Where the model and the work on its attention run; auto: a CUDA or MPS device when torch sees one.",
)
@click.option(
    "--dtype",
    type=click.Choice(api.DTYPES),
    default="auto",
    show_default=True,
    help="The weights' dtype; auto: bfloat16 on CUDA, float32 on the CPU and MPS. The attention softmax and every "
    "statistic stay float32; the dtype is part of the run id (runs.dtype).",
)
@quiet_option
@store_option
def ingest(
    corpus: Path | None,
    fmt: str,
    task: str | None,
    model: str | None,
    random_init: bool,
    config: tuple[str, ...],
    seed: int,
    sample: int | None,
    sample_seed: int,
    length: int | None,
    count: int | None,
    haystack: str | None,
    lengths: str | None,
    depths: str | None,
    needle: str | None,
    question: str | None,
    kept_mass: float,
    max_edges: int | None,
    dense: bool,
    max_length: int | None,
    pack: str | None,
    text: str,
    word_rows: str,
    norms: bool,
    rollout: str,
    engine: str,
    ray_address: str | None,
    workers: int | None,
    gpus_per_worker: float | None,
    device: str,
    dtype: str,
    quiet: bool,
    store_path: str | None,
) -> None:
    """Run a model over a corpus and add the run to the store (resumes if interrupted)."""
    ctx = click.get_current_context()

    def given(name: str) -> object:  # an option given on the command line, else None (the API's default)
        return ctx.params[name] if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE else None

    result = api.ingest(
        corpus,
        model,
        store_path,
        format=fmt,
        task=task,
        random_init=random_init,
        seed=given("seed"),
        sample=sample,
        sample_seed=given("sample_seed"),
        length=length,
        count=count,
        haystack=haystack,
        lengths=None if lengths is None else numbers("lengths", lengths),
        depths=None if depths is None else numbers("depths", depths),
        needle=needle,
        question=question,
        kept_mass=given("kept_mass"),
        max_edges=max_edges,
        dense=dense,
        max_length=max_length,
        pack=pack,
        text=text,
        word_rows=word_rows,
        norms=norms,
        rollout=rollout,
        progress=not quiet,
        engine=engine,
        ray_address=ray_address,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        device=device,
        dtype=dtype,
        config=config,
    )
    if result.already_present:
        click.echo(f"run {result.run_id} is already in {result.store}; nothing to do")
        return
    click.echo(
        f"run {result.run_id}: {result.n_examples} inputs, {result.n_skipped} skipped as longer than "
        f"--max-length, {result.n_edges:,} attention edges -> {result.store}"
    )
    if result.n_no_rollout:
        longest = result.longest_rollout
        has = "no input has one" if longest is None else f"the longest with one: {longest:,} pieces"
        click.echo(
            f"{result.n_no_rollout} input{'s were' if result.n_no_rollout > 1 else ' was'} too long for whole maps "
            f"on this device: read in blocks of rows, without a rollout ({has})"
        )
    if result.n_text_unmatched:
        click.echo(
            f"'# text' does not hold the words in {result.n_text_unmatched} sentences: those are read as their words "
            "joined (SpaceAfter=No honoured)"
        )
    if result.n_unknown:
        share = result.n_unknown / result.n_tokens
        click.echo(
            f"{result.n_unknown:,} of the {result.n_tokens:,} pieces ({share:.1%}) are the tokenizer's unknown token: "
            "the model reads no more of their text than that it is unknown"
        )
    if result.dropped_text is not None:
        click.echo(f"FrameNet exemplar sentences, Kovaleva et al.'s filters: {result.dropped_text}")
    if result.n_cut is not None:
        click.echo(
            f"{result.n_cut} of the {result.n_examples} pairs cut to --max-length (kept words in examples.sent_ids); "
            f"{result.n_left_out} left out (a paragraph would lose every word); {result.n_unpaired} "
            f"paragraph{'' if result.n_unpaired == 1 else 's'} left out without a partner (an article's odd last one)"
        )


@cli.command()
@click.option("--unfinished", is_flag=True, help="List the interrupted ingests instead (see 'atlas rm').")
@store_option
@format_option
def runs(unfinished: bool, store_path: str | None, fmt: str | None) -> None:
    """List the runs in the store, with what tells them apart (weights, seed and config, shape, max length, kept
    mass, pack)."""
    if unfinished:
        staged = api.open(store_path, must_exist=False).runs(unfinished=True)
        emit(staged, fmt, None)
        if not staged.is_empty():
            click.echo("re-run the same 'atlas ingest' to resume one, or 'atlas rm RUN' to discard it", err=True)
        return
    st = api.open(store_path)
    emit(st.runs(), fmt, None)
    for run_id in st.runs(unfinished=True)["unfinished_run"]:
        click.echo(
            f"unfinished (interrupted) ingest: {run_id}; re-run the same 'atlas ingest' to resume, or "
            f"'atlas rm {run_id}' to discard it",
            err=True,
        )


@cli.command()
@click.argument("run_ids", nargs=-1, required=True)
@store_option
def rm(run_ids: tuple[str, ...], store_path: str | None) -> None:
    """Remove runs (and every result stored with them), each in one atomic step; or discard an interrupted
    ingest (see 'atlas runs --unfinished')."""
    st = api.open(store_path, must_exist=False)
    for run_id, what in st.remove(*run_ids).items():
        click.echo(f"removed {what} {run_id}", err=True)


@cli.command()
@click.option("--names", is_flag=True, help="The entries' names only (in columns across a terminal).")
@click.option(
    "--store",
    "store_path",
    type=click.Path(file_okay=False),
    default=None,
    help="A store: each entry's name, whether it answers on the store's latest run, and if not, what to run first "
    "(without it, the catalogue alone).",
)
@format_option
def queries(names: bool, store_path: str | None, fmt: str | None) -> None:
    """List the analysis catalogue; with a store, which entries answer on it now."""
    if store_path is not None:
        if names:
            raise AtlasError(f"{arg('names')}: lists the catalogue alone; with {arg('store')}, leave it out")
        with api.open(store_path) as st:
            click.echo(f"on run {st.latest_run()}, the store's latest (an entry taking no run: on the store)", err=True)
            emit(st.ready(lambda refusal: refusal.cli_text(FLAGS)), fmt, None)
        return
    listed = api.queries()
    if not names:
        emit(listed, fmt, None)
    elif fmt in (None, "table"):  # down columns across a terminal, one a line into a pipe or a file
        click.echo(_packed(listed["name"].to_list(), terminal_width() if sys.stdout.isatty() else 0))
    else:
        emit(listed.select("name"), fmt, None)


def _packed(names: list[str], width: int) -> str:
    """``names`` down columns of the longest name's width, as many columns as fit ``width`` (at least one)."""
    column = max(map(len, names)) + 2
    n_rows = -(-len(names) // max(1, (width + 2) // column))
    rows = [names[i::n_rows] for i in range(n_rows)]
    return "\n".join("".join(name.ljust(column) for name in row).rstrip() for row in rows)


def _params(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AtlasError(f"{arg('param', repr(item))}: expected NAME=VALUE")
        if key.strip() in out:
            raise AtlasError(f"{arg(key.strip(), query=True)}: given twice; give each parameter once")
        out[key.strip()] = value.strip()
    return out


@cli.command()
@click.argument("phrase")
@run_option
@click.option("--param", "params", multiple=True, help="NAME=VALUE for a parameter of the query.")
@click.option(
    "--compare",
    "compare_ids",
    multiple=True,
    help="Another run (repeatable): the runs side by side, aligned on the entry's keys, with the differences to --run.",
)
@click.option(
    "--describe", is_flag=True, help="Print the entry's SQL file (its header, then its SQL) instead of running it."
)
@click.option(
    "--engine",
    type=click.Choice(api.ENGINES),
    default=api.ENGINES[0],
    show_default=True,
    help="Where the entry's SQL runs: DuckDB, or Apache Spark over the store's Parquet files (then --store may be "
    "any URI Spark reads, s3a://, hdfs://; needs pip install 'attention-atlas[spark]').",
)
@click.option("--spark-master", default="local[2]", show_default=True, help="The Spark master URL of --engine spark.")
@store_option
@file_format_option
@out_option
@limit_option
def query(
    phrase: str,
    run_id: str | None,
    params: tuple[str, ...],
    compare_ids: tuple[str, ...],
    describe: bool,
    engine: str,
    spark_master: str,
    store_path: str | None,
    fmt: str | None,
    out: Path | None,
    limit: int | None,
) -> None:
    """Run a catalogue entry named by PHRASE (a name, an alias or close words).

    Where close words chose the entry, a line on stderr says which, first; a phrase that fits several
    entries alike runs none and lists them. Then a line on stderr names the entry and the runs that
    answered. Exit status 1 (with one line saying what to run first) when the entry needs a step that has
    not run on the store, e.g. 'head distances' before 'atlas distances'.
    """
    if describe:
        given = {"out": out, "format": fmt, "param": params, "run": run_id, "compare": compare_ids, "limit": limit}
        given["engine"] = engine != api.ENGINES[0]  # the default engine, named or not, runs nothing either
        if unused := [arg(name) for name, value in given.items() if value]:
            said = ", ".join(unused)
            raise AtlasError(f"{arg('describe')}: prints the entry's text, running nothing; leave out {said}")
        click.echo(api.describe(_entry_name(phrase)))
        return
    shown = check_output(fmt, out)  # before the entry runs
    answer = _answer(phrase, run_id, params, store_path, compare_ids, None, engine=engine, master=spark_master)
    frame = answer.frame
    if answer.runs and shown == "table" and out is None:  # run ids as letters: fits a terminal
        frame, said = answer.lettered()
        click.echo(said, err=True)
    emit(frame, fmt, out, limit)


def _entry_name(phrase: str) -> str:
    """The name of the entry PHRASE names; where close words chose it, a line on stderr says which, first."""
    entry, said = api.choose(phrase)
    if said is not None:
        click.echo(said, err=True)
    return entry.name


def _answer(
    phrase: str,
    run_id: str | None,
    params: tuple[str, ...],
    store_path: str | None,
    compare: tuple[str, ...] = (),
    figure: Path | None = None,
    **given: str | None,
) -> api.Answer:
    """Run an entry (``compare``: beside --run, default the latest run, more runs; ``figure``: draw it into this
    file; ``given``: the engine its SQL runs on and Spark's master, or the figure's title, as ``api.answer`` takes
    them); its title line (the entry and the runs that answered) and notes go to stderr."""
    name = _entry_name(phrase)
    runs = [run_id, *compare] if compare else None
    answer = api.answer(name, store_path, None if compare else run_id, runs, figure, params=_params(params), **given)
    click.echo(answer.title, err=True)
    for note in answer.notes:
        click.echo(note_cli_text(note), err=True)
    return answer


@cli.command(name="plot")
@click.argument("phrase")
@click.option("--out", required=True, type=FilePath(dir_okay=False), help="Figure file: .png, .pdf or .svg.")
@run_option
@click.option("--param", "params", multiple=True, help="NAME=VALUE for a parameter of the query.")
@click.option(
    "--compare",
    "compare_ids",
    multiple=True,
    help="Another run (repeatable): panels side by side on one colour scale, and the differences to --run.",
)
@click.option(
    "--title",
    default=None,
    help="The figure's title (default: the entry and its paper, e.g. 'entropy (Clark et al. 2019)'; '': none). The "
    "runs that answered are said in small type at its foot.",
)
@store_option
def plot_command(
    phrase: str,
    out: Path,
    run_id: str | None,
    params: tuple[str, ...],
    compare_ids: tuple[str, ...],
    title: str | None,
    store_path: str | None,
) -> None:
    """Draw the paper-style figure of a catalogue entry (PNG, PDF or SVG, by the --out file's suffix)."""
    _answer(phrase, run_id, params, store_path, compare_ids, out, title=title)
    click.echo(f"wrote {out}", err=True)


@cli.command()
@run_option
@click.option(
    "--examples",
    default=500,
    show_default=True,
    type=click.IntRange(min=1),
    help="Inputs to average over (the first ones).",
)
@click.option("--clusters", default=6, show_default=True, type=click.IntRange(min=1), help="Number of head clusters.")
@click.option(
    "--model",
    default=None,
    help="The run's model, where it has moved since the ingest (default: where the run recorded it; its weights "
    "are checked against the run's).",
)
@quiet_option
@store_option
def distances(
    run_id: str | None, examples: int, clusters: int, model: str | None, quiet: bool, store_path: str | None
) -> None:
    """Compute head distances (JS divergence, MDS, clusters) for a run and add them to the store."""
    run_id = api.open(store_path).distances(run_id, examples, clusters, progress=not quiet, model=model)
    click.echo(f"head distances of {run_id} written; see 'atlas query \"head distances\"'", err=True)


@cli.command()
@click.option(
    "--train",
    "train_run",
    required=True,
    multiple=True,
    callback=single_value,
    help="Run whose sentences the probes are trained on.",
)
@click.option(
    "--eval",
    "eval_run",
    required=True,
    multiple=True,
    callback=single_value,
    help="Run the probes are scored on (same model).",
)
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(min=1), help="Passes over the train run.")
@click.option(
    "--learning-rate",
    default=0.002,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Adam's step size.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the initial weights.")
@click.option("--train-limit", type=click.IntRange(min=1), default=None, help="Only the first N train inputs.")
@click.option("--eval-limit", type=click.IntRange(min=1), default=None, help="Only the first N eval inputs.")
@click.option(
    "--glove-shift",
    is_flag=True,
    help="Only the GloVe probes, with the released code's vectors (each candidate gets the next word's); "
    "for comparison.",
)
@click.option(
    "--model",
    default=None,
    help="The run's model, where it has moved since the ingest (default: where the run recorded it; its weights "
    "are checked against the run's).",
)
@quiet_option
@store_option
@format_option
def probe(
    train_run: str,
    eval_run: str,
    epochs: int,
    learning_rate: float,
    seed: int,
    train_limit: int | None,
    eval_limit: int | None,
    glove_shift: bool,
    model: str | None,
    quiet: bool,
    store_path: str | None,
    fmt: str,
) -> None:
    """Train the attention probes of Clark et al. (Section 5) on one run, score UAS on another."""
    results = api.open(store_path).probe(
        train_run,
        eval_run,
        epochs=epochs,
        learning_rate=learning_rate,
        seed=seed,
        train_limit=train_limit,
        eval_limit=eval_limit,
        glove_shift=glove_shift,
        progress=not quiet,
        model=model,
    )
    emit(results, fmt, None)
    click.echo("written; see 'atlas query \"probe results\"'", err=True)


@cli.command()
@run_option
@click.option(
    "--labels",
    type=FilePath(dir_okay=False),
    default=None,
    help="CSV of hand labels (example_id, layer, head, pattern): train the paper's CNN instead of the rule.",
)
@click.option(
    "--model",
    default=None,
    help="The run's model, where it has moved since the ingest (default: where the run recorded it; its weights "
    "are checked against the run's).",
)
@quiet_option
@store_option
def patterns(run_id: str | None, labels: Path | None, model: str | None, quiet: bool, store_path: str | None) -> None:
    """Class every (input, head) map into Kovaleva et al.'s five patterns (rule in 'atlas/patterns.py')."""
    classed = api.open(store_path).patterns(run_id, labels, model, progress=not quiet)
    if classed.f1 is not None:
        click.echo(
            f"CNN: cross-validated macro F1 {classed.f1:.1f} on the labels; {classed.n_maps:,} maps of "
            f"{classed.run_id} classed"
        )
        return
    rule = ", ".join(f"{k} {v}" for k, v in (classed.thresholds or {}).items())
    click.echo(
        f"{classed.n_maps:,} maps of {classed.run_id} classed (thresholds: {rule}); "
        "see 'atlas query \"pattern shares\"'"
    )


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("statement", required=False)
@click.option(
    "-f", "--file", "sql_file", type=click.File("r"), default=None, help="Read the SQL from FILE ('-': standard input)."
)
@store_option
@file_format_option
@out_option
@limit_option
def sql(
    statement: str | None, sql_file, store_path: str | None, fmt: str | None, out: Path | None, limit: int | None
) -> None:
    """Run read-only SQL over the store (one SELECT statement), given as STATEMENT, '-' (standard input) or -f FILE.

    Tables: runs, examples, tokens, words, mentions, frames, attn_edges, attn_rows, head_norms, rollout,
    attn_distance, word_rows, head_pairs, head_scores, probes, task_models, ablations, attention_gradients,
    patterns (columns in schema.sql).
    Layers, heads and token and word positions are 0-based in the store; the catalogue's answers show
    layers and heads 1-based (layer-head), as the papers do. SQL may begin with '--' comments.
    """
    check_output(fmt, out)
    relation = api.open(store_path).relation(_sql_text(statement, sql_file))
    try:
        emit(relation, fmt, out, limit)  # streamed in batches, whatever the result's size
    except duckdb.Error as exc:
        raise AtlasError(f"sql: {str(exc).splitlines()[0]}") from None


def _sql_text(statement: str | None, sql_file) -> str:
    if sql_file is not None and statement is not None:
        raise AtlasError("sql: give the SQL as STATEMENT or with -f FILE, not both")
    source = "standard input" if statement == "-" else getattr(sql_file, "name", None)
    try:
        if statement == "-":
            statement = sys.stdin.read()
        elif sql_file is not None:
            statement = sql_file.read()
        if statement is not None:
            statement.encode()  # standard input's bytes that are not UTF-8 come as lone surrogates
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise AtlasError(f"{source}: not UTF-8 text") from None
    if statement is not None and statement.startswith("-") and len(statement.split()) == 1 and statement != "-":
        raise AtlasError(f"sql: no such option {statement} (see 'atlas sql --help')")
    if not statement or not statement.strip():
        raise AtlasError("sql: no SQL given (STATEMENT, '-' for standard input, or -f FILE)")
    return statement


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--run", "run_id", multiple=True, callback=single_value, help="Only this run (default: every run).")
@quiet_option
@store_option
def export(fmt: str, out: str, run_id: str | None, quiet: bool, store_path: str | None) -> None:
    """Write every table of the store as one Parquet file per table."""
    for name, n_rows in api.open(store_path).export(out, run_id, progress=not quiet).items():
        click.echo(f"{name}: {n_rows:,} rows", err=True)


@cli.command()
@click.option("--out", required=True, type=FilePath(dir_okay=False), help="Report file (.html).")
@run_option
@click.option(
    "--examples", default=20, show_default=True, type=click.IntRange(min=0), help="Inputs in the attention explorer."
)
@click.option(
    "--compare",
    "compare_id",
    multiple=True,
    callback=single_value,
    help="A second run shown side by side (e.g. a fine-tuned model over the same corpus).",
)
@quiet_option
@store_option
def report(
    out: Path, run_id: str | None, examples: int, compare_id: str | None, quiet: bool, store_path: str | None
) -> None:
    """Write one self-contained HTML page about a run: its metadata, every catalogue entry that has an answer
    for it (tables and figures), and an attention explorer over its first inputs. Nothing in it is loaded
    from the network: open it in any browser, offline, or mail it."""
    written = api.open(store_path).report(out, run_id, examples, compare_id, progress=not quiet)
    click.echo(
        f"wrote {written.path} ({written.size / 1e6:.1f} MB): {written.n_entries} catalogue entries, "
        f"{written.n_skipped} left out (reasons in the page), {written.n_examples} inputs in the explorer",
        err=True,
    )


for _command in (*TASK_COMMANDS, look_command, serve):
    cli.add_command(_command)


class _Closed(io.TextIOBase):
    """Standard output where the shell closed it (atlas ... >&-): writing to it is an error, said in one line."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed: nothing can be written to it (give --out FILE)")


def main() -> None:
    sys.stdin = sys.stdin or open(os.devnull)  # noqa: SIM115 (closed by the shell: read as empty)
    sys.stdout = sys.stdout or _Closed()
    cli(prog_name="atlas")


if __name__ == "__main__":  # python -m atlas.cli: every command is registered above
    main()
