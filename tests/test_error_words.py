"""Each surface names a parameter in its own words: the Python API's errors as its parameters (``kept_mass=2:``),
the command line's as its options (``--kept-mass 2:``); see ``atlas.errors``."""

from __future__ import annotations

import ast
import collections.abc
import inspect
import re
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import atlas
from atlas import checks, errors
from atlas.api_tasks import ablate
from atlas.cli import FLAGS, cli
from atlas.errors import AtlasError
from atlas.ingestion.readers.conllu import write_first_sentences
from atlas.prerequisites import check
from atlas.store import Store
from atlas.tasks.ablate import sweep

ROOT = Path(__file__).resolve().parent.parent


def cli_line(*args: str) -> str:
    """The one line the command line prints for a user error."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    return line


def api_error(call, *args, **kwargs) -> AtlasError:
    with pytest.raises(AtlasError) as raised:
        call(*args, **kwargs)
    return raised.value


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    sample = ROOT / "samples" / "ud" / "en_ewt-ud-dev-sample.conllu"
    return write_first_sentences(sample, 3, tmp_path_factory.mktemp("words") / "three.conllu")


@pytest.fixture(scope="module")
def run(tmp_path_factory, corpus) -> tuple[Path, str]:
    """A store with one run."""
    root = tmp_path_factory.mktemp("words") / "store"
    return root, atlas.ingest(corpus, store=root, progress=False).run_id


def test_a_number_out_of_range(corpus, tmp_path):
    store = tmp_path / "store"
    error = api_error(atlas.ingest, corpus, kept_mass=2, store=store, progress=False)
    assert str(error).startswith("kept_mass=2: ")
    line = cli_line("ingest", "--corpus", str(corpus), "--kept-mass", "2", "--store", str(store))
    assert line.startswith("Error: --kept-mass 2: ")
    assert line == f"Error: {error.cli_text(FLAGS)}" and not store.exists()


@pytest.mark.parametrize(
    ("kwargs", "args", "api_words", "cli_words"),
    [
        (
            {"kept_mass": 0.5, "dense": True},
            ["--kept-mass", "0.5", "--dense"],
            "kept_mass: dense keeps every weight; give one of dense and kept_mass",
            "--kept-mass: --dense keeps every weight; give one of --dense and --kept-mass",
        ),
        (
            {"max_edges": 3, "dense": True},
            ["--max-edges", "3", "--dense"],
            "max_edges: dense keeps every weight",
            "--max-edges: --dense keeps every weight",
        ),
        (
            {"workers": 2},
            ["--workers", "2"],
            "workers: sets up the Ray workers; add engine='ray' or leave workers out",
            "--workers: sets up the Ray workers; add --engine 'ray' or leave --workers out",
        ),
        (
            {"gpus_per_worker": 1},
            ["--gpus-per-worker", "1"],
            "gpus_per_worker: sets up the Ray workers; add engine='ray' or leave gpus_per_worker out",
            "--gpus-per-worker: sets up the Ray workers; add --engine 'ray' or leave --gpus-per-worker out",
        ),
        (
            {"seed": 3},
            ["--seed", "3"],
            "seed: seeds random_init's weights; without random_init the model is the same",
            "--seed: seeds --random-init's weights; without --random-init the model is the same",
        ),
        (
            {"task": "SST-2"},
            ["--task", "SST-2"],
            "task: names the GLUE task of a format='glue' file; add format='glue' or leave task out",
            "--task: names the GLUE task of a --format 'glue' file; add --format 'glue' or leave --task out",
        ),
        (
            {"format": "text", "pack": "window"},
            ["--format", "text", "--pack", "window"],
            "pack: a text file is read as paragraph pairs; leave pack out",
            "--pack: a text file is read as paragraph pairs; leave --pack out",
        ),
        (
            {"sample": 2},
            ["--sample", "2"],
            "sample: only a format='text' corpus is sampled",
            "--sample: only a --format 'text' corpus is sampled",
        ),
    ],
)
def test_ingest_options(corpus, tmp_path, kwargs, args, api_words, cli_words):
    store = tmp_path / "store"
    error = api_error(atlas.ingest, corpus, store=store, progress=False, **kwargs)
    assert str(error).startswith(api_words) and "--" not in str(error)
    line = cli_line("ingest", "--corpus", str(corpus), *args, "--store", str(store))
    assert line.startswith(f"Error: {cli_words}") and line == f"Error: {error.cli_text(FLAGS)}"


def test_a_folder_as_corpus(tmp_path):
    error = api_error(atlas.ingest, tmp_path, store=tmp_path / "store", progress=False)
    assert str(error) == f"corpus='{tmp_path}': is a folder; name the corpus file"
    line = cli_line("ingest", "--corpus", str(tmp_path), "--store", str(tmp_path / "store"))
    assert line == f"Error: --corpus '{tmp_path}': is a folder; name the corpus file"


def test_no_store_here(tmp_path):
    missing = tmp_path / "none"
    error = api_error(atlas.open, missing)
    assert str(error).startswith(f"store='{missing}': no store here")
    assert cli_line("runs", "--store", str(missing)).startswith(f"Error: --store '{missing}': no store here")


def test_runs_named_as_given(run, tmp_path):
    root, run_id = run
    with atlas.open(root) as st:
        assert str(api_error(st.query, "entropy", run="nope")).startswith("run='nope': no such run")
        assert str(api_error(st.query, "entropy", runs=[run_id, "nope"])).startswith("runs='nope': no such run")
        assert str(api_error(st.query, "entropy", runs=["nope", run_id])).startswith("runs[0]='nope': no such run")
        assert str(api_error(st.query, "entropy", runs=[run_id])).startswith("runs: name two or more")
        error = api_error(st.query, "coreference heads", select_run="nope")
        assert str(error).startswith("select_run='nope': no such run")
        assert str(api_error(st.query, "glue baselines", run=run_id)).startswith("run: 'glue baselines' takes no run")
        report = api_error(st.report, tmp_path / "r.html", run=run_id, compare=run_id)
        assert str(report) == f"compare='{run_id}': is the run reported on; name another run"
        out = api_error(st.report, tmp_path / "r.txt")
        assert str(out) == f"out='{tmp_path / 'r.txt'}': the report is an HTML file; name it .html"
    query = ("query", "entropy", "--store", str(root))
    assert cli_line(*query, "--run", "nope").startswith("Error: --run 'nope': no such run")
    assert cli_line(*query, "--compare", "nope").startswith("Error: --compare 'nope': no such run")
    assert cli_line(*query, "--run", "nope", "--compare", run_id).startswith("Error: --run 'nope': no such run")
    line = cli_line("query", "coreference heads", "--store", str(root), "--param", "select_run=nope")
    assert line.startswith("Error: --param select_run='nope': no such run")
    assert cli_line(*query, "--param", "nope") == "Error: --param 'nope': expected NAME=VALUE"
    line = cli_line("report", "--out", str(tmp_path / "r.html"), "--compare", run_id, "--store", str(root))
    assert line == f"Error: --compare '{run_id}': is the run reported on; name another run"
    line = cli_line("report", "--out", str(tmp_path / "r.txt"), "--store", str(root))
    assert line == f"Error: --out '{tmp_path / 'r.txt'}': the report is an HTML file; name it .html"


def test_probe_runs(run):
    root, run_id = run
    with atlas.open(root) as st:
        error = api_error(st.probe, run_id, "nope", progress=False)
        assert str(error).startswith("eval_run='nope': no such run")
        assert str(api_error(st.probe, "nope", run_id, progress=False)).startswith("train_run='nope': no such run")
    probe = ("probe", "--store", str(root), "--quiet")
    line = cli_line(*probe, "--train", run_id, "--eval", "nope")
    assert line.startswith("Error: --eval 'nope': no such run") and line == f"Error: {error.cli_text(FLAGS)}"
    assert cli_line(*probe, "--train", "nope", "--eval", run_id).startswith("Error: --train 'nope': no such run")


def test_flags_that_turn_a_parameter_off():
    error = api_error(sweep, None, [], "uniform", heads=False, layers=False)
    assert str(error) == "ablate: heads=False and layers=False leave nothing to disable"
    assert error.cli_text(FLAGS) == "ablate: --no-heads and --no-layers leave nothing to disable"
    assert str(api_error(ablate, "m", "RTE", "d", method="zero")).startswith("method='zero': expected one of")


# the messages raised in these files still say the command line's options (converted apart)
CLI_WORDED = {"catalogue.py", "compare.py", "plot.py", "output.py", "catalogue_doc.py"}
COMMAND = re.compile(r"'atlas [^']*'")  # a command to run, quoted: 'atlas runs --unfinished'
FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _sources() -> list[Path]:
    files = {p.resolve() for folder in ("atlas", "ingest") for p in (ROOT / folder).rglob("*.py")}
    return sorted(files | {(ROOT / "cli.py").resolve()})


def _text(node: ast.expr) -> str | None:
    """A literal message as written ('{}' for each formatted value), None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def test_no_error_message_names_a_cli_option():
    """A message names a parameter with ``arg``, never as a literal option: neither at its start nor in its body
    (a quoted 'atlas ...' command may hold options)."""
    found = []
    for path in _sources():
        if path.name in CLI_WORDED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            text = _text(node.exc.args[0])
            if text is not None and (text.startswith("--") or FLAG.search(COMMAND.sub("", text))):
                found.append(f"{path.relative_to(ROOT.resolve())}:{node.lineno}: {text}")
    assert not found, "\n".join(found)


def test_no_message_helper_takes_an_option():
    """Nothing outside the command line's own modules holds an option as a string to build a message with (a
    parameter default such as option='--run', an argument such as f"--model '{name}'")."""
    found = []
    for path in _sources():
        if path.name == "cli.py" or path.name.startswith("cli_") or path.name in CLI_WORDED | {"errors.py"}:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            text = _text(node) if isinstance(node, ast.expr) and id(node) not in docstrings else None
            if text is not None and FLAG.match(text):
                found.append(f"{path.relative_to(ROOT.resolve())}:{node.lineno}: {text}")
    assert not found, "\n".join(found)


def test_a_store_names_itself_as_the_parameter(tmp_path):
    store = Store(tmp_path / "s")
    error = AtlasError(f"{store.named}: x")
    assert str(error) == f"store='{store.root}': x" and error.cli_text(FLAGS) == f"--store '{store.root}': x"


@pytest.mark.parametrize(
    ("name", "params", "api_words", "cli_words"),
    [
        (
            "entropy",
            {"min_count": "3"},
            "min_count: 'entropy' has no such parameter (it takes: run)",
            "--param min_count: 'entropy' has no such parameter (it takes: run)",
        ),
        (
            "best head per dependency relation",
            {"min_count": "x"},
            "min_count=x: expected a whole number",
            "--param min_count=x: expected a whole number",
        ),
        ("attention sink", {"threshold": "nan"}, "threshold=nan: expected a finite number", None),
        (
            "best head per dependency relation",
            {"min_count": 10**20},
            f"min_count={10**20}: expected a whole number from",
            None,
        ),  # beyond DuckDB's BIGINT
        ("best head per dependency relation", {"poss_rule": "maybe"}, "poss_rule=maybe: expected true or false", None),
        ("fine-tuning change", {}, "base: required by 'fine-tuning change'", "--param base: required by"),
    ],
)
def test_catalogue_parameters(run, name, params, api_words, cli_words):
    """An entry's parameter is a keyword in the API and --param NAME=VALUE on the command line."""
    root, _ = run
    with atlas.open(root) as st:
        error = api_error(st.query, name, **params)
    assert str(error).startswith(api_words) and "--" not in str(error)
    args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
    line = cli_line("query", name, "--store", str(root), *args)
    assert line.startswith(f"Error: {cli_words or '--param ' + api_words}"), line


def test_runs_of_other_shapes_compared(run, tmp_path):
    """The run that differs is named as the API's runs and as the command line's --compare."""
    root, run_id = run
    other = atlas.ingest(None, store=root, format="repeated", length=4, count=2, random_init=True, progress=False,
                         config=["num_hidden_layers=2", "num_attention_heads=2"]).run_id  # fmt: skip
    with atlas.open(root) as st:
        error = api_error(st.query, "entropy", runs=[run_id, other])
    assert str(error).startswith(f"runs='{other}': its model has 2 layers x 2 heads")
    line = cli_line("query", "entropy", "--store", str(root), "--run", run_id, "--compare", other)
    assert line.startswith(f"Error: --compare '{other}': its model has 2 layers x 2 heads")


def test_commands_are_said_as_the_apis_calls(run):
    """A message in the command line's words (a command quoted whole, an ingest's option) is said by the API as its
    calls and arguments, by the command line as written: an entry's need, its SQL's own refusal, a note, atlas's
    own messages."""
    root, run_id = run
    cases = [  # entry, its parameters: the API's words, the command line's
        ("head distances", {"run": run_id}, f"Atlas.distances(run='{run_id}') first",
         f"'atlas distances --run {run_id}' first"),
        ("token to token", {"run": run_id}, "ingest with dense=True", "ingest with --dense"),  # refused by its SQL
        ("special tokens", {"run": "nope"}, "(see Atlas.runs())", "(see 'atlas runs')"),
    ]  # fmt: skip
    with atlas.open(root) as st:
        for name, params, api_words, cli_words in cases:
            assert str(api_error(st.query, name, **params)).endswith(api_words), name
            args = [word for key, value in params.items() for word in (f"--{key}", value)]
            assert cli_line("query", name, "--store", str(root), *args).endswith(cli_words), name
        with pytest.warns(atlas.AtlasNote, match=r"ingest with pack='pair'\)$"):
            st.query("sep to sep", run=run_id)
    result = CliRunner().invoke(cli, ["query", "sep to sep", "--store", str(root), "--run", run_id])
    assert result.exit_code == 0 and "ingest with --pack pair)" in result.stderr


def test_every_command_said_is_an_api_call():
    """The API's call for each command a message may name exists, with the arguments its options become."""
    for command, call in errors._COMMANDS.items():
        assert command in cli.commands, command
        owner, name = call.split(".")
        assert callable(getattr(atlas if owner == "atlas" else atlas.Atlas, name)), call
    assert {"train_run", "eval_run"} <= set(inspect.signature(atlas.Atlas.probe).parameters)
    assert "runs" in inspect.signature(atlas.Atlas.query).parameters
    assert (
        errors.api_phrases("see 'atlas nosuch --x' or 'atlas' and x--dense or 'atlas ingest --help'")
        == "see 'atlas nosuch --x' or 'atlas' and x--dense or help(atlas.ingest)"
    )


def test_arguments_of_another_type_are_refused_naming_them(run, corpus, tmp_path):
    """An argument not of its parameter's type is refused before any work, naming it: not a Python, DuckDB or
    numba error from deep inside, and not taken as something else (random_init='no' as true, seed=1.5 as 1,
    runs='R' as its letters, example='3' as an example skipped)."""
    root, run_id = run
    store = tmp_path / "new"
    with atlas.open(root) as st:
        cases = [
            (lambda: atlas.ingest(corpus, store=store, random_init="no"), "random_init='no': expected True or False"),
            (lambda: atlas.ingest(corpus, store=store, random_init=True, seed=1.5), "seed=1.5: expected a whole"),
            (lambda: atlas.ingest(corpus, store=store, max_edges=1.5), "max_edges=1.5: expected a whole number"),
            (lambda: atlas.ingest(corpus, store=store, kept_mass="0.5"), "kept_mass='0.5': expected a number"),
            (lambda: atlas.ingest(corpus, store=store, random_init=True, config=5), "config=5: expected a mapping"),
            (lambda: st.attention(example="3", layer=1, head=1), "example='3': expected a whole number"),
            (lambda: st.attention(example=0, layer=1.5, head=1), "layer=1.5: expected a whole number"),
            (lambda: st.distances(examples=1, clusters=float("nan")), "clusters=nan: expected a whole number"),
            (lambda: st.query(None), "name=None: expected text"),
            (lambda: st.query("entropy", run=5), "run=5: expected text (or None)"),
            (lambda: st.query("entropy", runs=run_id), f"runs='{run_id}': expected a list of text (or None)"),
            (lambda: st.remove(5), "run_ids=5: expected text"),
            (lambda: st.remove(), "run_ids: none given"),
            (lambda: st.sql(None), "text=None: expected text"),
            (lambda: atlas.open(5), "path=5: expected a path (or None)"),
            (lambda: st.report(tmp_path / "r.html", examples=1.5), "examples=1.5: expected a whole number"),
            (lambda: atlas.finetune("sst-2", "x", tmp_path / "ck", epochs=1.5), "epochs=1.5: expected a whole number"),
        ]  # fmt: skip
        for call, said in cases:
            error = api_error(call)
            assert str(error).startswith(said), (said, str(error))
    assert not store.exists() and not (tmp_path / "ck").exists()


def test_a_store_no_store_can_be_at_is_refused_before_any_work(corpus, tmp_path):
    """A store path naming a file (or a folder under one) is refused before the model loads, not after its work."""
    for store in (corpus, corpus / "store"):
        error = api_error(atlas.ingest, corpus, store=store, progress=False)
        assert str(error).startswith(f"store='{store}': "), str(error)
        error = api_error(
            atlas.finetune, "sst-2", str(ROOT / "samples" / "glue" / "SST-2"), tmp_path / "ck", store=store
        )
        assert str(error).startswith(f"store='{store}': ") and not (tmp_path / "ck").exists(), str(error)


def test_an_export_into_the_store_is_refused(run, tmp_path):
    """Tables exported inside the store would be read as its own (data/*/runs/*.parquet): refused, nothing written."""
    root, run_id = run
    with atlas.open(root) as st:
        for out in (root / "data" / "x" / "runs", root / "data", root / ".staging" / "x"):
            error = api_error(st.export, out, run=run_id, progress=False)
            assert str(error).startswith(f"out='{out}': inside the store's runs"), str(error)
        assert not (root / "data" / "x").exists() and not list((root / "data").glob("*.parquet"))
        assert st.runs()["run_id"].to_list().count(run_id) == 1


def test_typed_takes_what_the_annotation_says_and_gives_python_values():
    """NumPy's scalars pass as Python's (a run id's JSON takes no int64); an array or a Series passes as a list, a
    generator (read once) and a str do not; a refused value is shown on one line, cut."""

    @checks.typed
    def call(n: int, share: float, flag: bool, runs: collections.abc.Sequence[str | None] | None = None) -> tuple:
        return n, share, flag, runs

    got = call(np.int64(3), np.float32(0.9), np.bool_(True))
    assert got == (3, 0.9, True, None) and [type(v) for v in got[:3]] == [int, float, bool]  # 0.9, not float32's
    assert call(1, 2, False, runs=pl.Series(["a", None]))[3].to_list() == ["a", None]
    assert call(1, 2.0, False, runs=("a", "b"))[3] == ("a", "b")
    for runs in ((r for r in "ab"), "ab", ["a", 3], {"a", "b"}, np.array("a")):  # a set has no first run
        assert "expected a list of text (or None)" in str(api_error(call, 1, 2.0, False, runs=runs))
    said = str(api_error(call, 1, 2.0, False, runs=pl.Series(list(range(1000)))))
    assert "\n" not in said and len(said) < 400
    assert str(api_error(call, True, 2.0, False)) == "n=True: expected a whole number"


def test_phrases_of_the_command_line_kept_whole():
    """A run id holding a quote or a space stays one value; a marked parameter's value and words that are not a
    command or an option's value are left as written."""
    assert errors.api_phrases("run 'atlas distances --run O'Brien__m' first") == (
        'run Atlas.distances(run="O\'Brien__m") first'
    )
    assert errors.api_phrases("remove it ('atlas rm my corpus__m')") == "remove it (Atlas.remove('my corpus__m'))"
    assert errors.api_text(errors.arg("corpus", "'x--dense'") + ": ingest with --dense") == (
        "corpus='x--dense': ingest with dense=True"
    )
    assert (
        errors.api_phrases("the name says parquet but --format is csv") == "the name says parquet but --format is csv"
    )


def test_a_run_id_in_a_need_is_one_value_however_it_is_spelt():
    """A run id from a corpus named with a quote or a space (students' essays.conllu) is one value of the command a
    need's message names: quoted as Python quotes it in the API's words, as given in the command line's."""
    con = duckdb.connect()
    con.execute((ROOT / "schema.sql").read_text())
    for run in ("students' essays__m__h", "a --b__m__h"):
        error = api_error(check, con, "head distances", {"run": run})
        assert str(error).endswith(f"run Atlas.distances(run={run!r}) first"), str(error)
        assert error.cli_text().endswith(f"run 'atlas distances --run {run}' first")


def test_a_store_at_a_uri_is_for_spark(monkeypatch):
    """DuckDB reads a store in a folder; a URI (which a path would mangle: s3a:/bucket) is refused, naming Spark."""
    error = api_error(atlas.open, "s3a://bucket/store")
    assert str(error).startswith("store='s3a://bucket/store': a URI; only the catalogue on Spark reads a store there")
    monkeypatch.setenv("ATLAS_STORE", "hdfs://host/store")
    assert str(api_error(atlas.open)).startswith("ATLAS_STORE 'hdfs://host/store': a URI;")
