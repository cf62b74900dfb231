"""Values a user can type that once ended in a Python traceback or ran on with nonsense: each now gets one line
naming the option, exit 1, and no store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import atlas
from atlas.catalogue import resolve
from atlas.checks import SEED_MAX
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.readers.conllu import write_first_sentences
from atlas.model.identity import default_model_path

ROOT = Path(__file__).resolve().parent.parent
SST2 = ROOT / "samples" / "glue" / "SST-2"


def refused(*args: str) -> str:
    """The one line the command line prints, having exited 1 (a traceback would raise here)."""
    result = CliRunner().invoke(cli, list(args), prog_name="atlas", catch_exceptions=False)
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    return line


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    sample = ROOT / "samples" / "ud" / "en_ewt-ud-dev-sample.conllu"
    return write_first_sentences(sample, 2, tmp_path_factory.mktemp("bad") / "two.conllu")


@pytest.fixture(scope="module")
def store(tmp_path_factory, corpus) -> Path:
    """A store with one run (the probe is asked of a store's runs)."""
    root = tmp_path_factory.mktemp("bad") / "store"
    atlas.ingest(corpus, store=root, progress=False)
    return root


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["query"], "Error: Missing argument 'PHRASE' (see 'atlas query --help')"),
        (["rm"], "Error: Missing argument 'RUN_IDS...' (see 'atlas rm --help')"),
        (["probe", "--eval", "r"], "Error: Missing option '--train' (see 'atlas probe --help')"),
    ],
)
def test_a_missing_argument_is_named(args, line):
    assert refused(*args) == line


@pytest.mark.parametrize("seed", ["-1", str(SEED_MAX + 1), "99999999999999999999999"])
@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "--random-init", "--seed"],
        ["ingest", "--format", "repeated", "--sample-seed"],
        ["probe", "--train", "a", "--eval", "b", "--seed"],
        ["finetune", "--task", "SST-2", "--data", str(SST2), "--out", "never", "--seed"],
        ["importance", "--model", "m", "--task", "SST-2", "--data", str(SST2), "--seed"],
        ["grads", "--corpus", "c.conllu", "--seed"],
    ],
    ids=["ingest", "repeated", "probe", "finetune", "importance", "grads"],
)
def test_seeds_out_of_range(store, tmp_path, args, seed):
    before = sorted(store.rglob("*"))
    line = refused(*args, seed, "--store", str(store))
    assert line == f"Error: {args[-1]} {seed}: expected a seed from 0 to {SEED_MAX}"
    assert sorted(store.rglob("*")) == before and not Path("never").exists()


@pytest.mark.parametrize("rate", ["nan", "inf", "-1", "0", "1e300"])
@pytest.mark.parametrize(
    "args",
    [
        ["probe", "--train", "a", "--eval", "b"],
        ["finetune", "--task", "SST-2", "--data", str(SST2), "--out", "never"],
    ],
    ids=["probe", "finetune"],
)
def test_step_sizes_out_of_range(store, args, rate):
    line = refused(*args, "--learning-rate", rate, "--store", str(store))
    assert line.startswith("Error: --learning-rate ")
    assert line.endswith(("expected a step size above 0 and at most 1", "expected above 0")), line


def _model_copy(folder: Path) -> Path:
    """The embedded model's files, linked into ``folder`` (to be spoilt one at a time)."""
    folder.mkdir()
    for file in Path(default_model_path()).iterdir():
        (folder / file.name).symlink_to(file)
    return folder


def test_a_truncated_weights_file(corpus, tmp_path):
    model = _model_copy(tmp_path / "model")
    weights = model / "model.safetensors"
    data = weights.read_bytes()[:1000]
    weights.unlink()
    weights.write_bytes(data)
    line = refused("ingest", "--corpus", str(corpus), "--model", str(model), "--store", str(tmp_path / "store"))
    assert line.startswith(f"Error: --model '{model}': cannot load it (") and "header" in line
    assert not (tmp_path / "store").exists()


def test_a_config_value_of_the_wrong_type(corpus, tmp_path):
    model = _model_copy(tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").unlink()
    (model / "config.json").write_text(json.dumps({**config, "hidden_size": "abc"}))
    line = refused("ingest", "--corpus", str(corpus), "--model", str(model), "--store", str(tmp_path / "store"))
    assert line.startswith(f"Error: --model '{model}': cannot load it (config.json: ") and "hidden_size" in line
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["sql", "SELECT '\udcff'"],
        ["query", "best head per dependency relation", "--run", "r\udcff"],
        ["ingest", "--corpus", "c\udcff.conllu"],
        ["ingest", "--corpus", "c.conllu", "--store", "s\udcff"],
    ],
    ids=["sql", "run", "corpus", "store"],
)
def test_arguments_not_utf8(store, args):
    """Bytes that are not UTF-8 in the shell's arguments (Python keeps them as lone surrogates)."""
    line = refused(*args, *(["--store", str(store)] if "--store" not in args else []))
    assert line.startswith("Error: '") and line.endswith("': not UTF-8 text (the atlas reads arguments as UTF-8)")
    assert "\\xff" in line


def test_a_store_whose_database_is_not_one(store, corpus, tmp_path):
    """An ingest into it is refused (it would write runs that no query could read); removed, the file is written
    again over the runs, which are all there."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    (copy / "atlas.duckdb").write_text("not a database\n")
    before = sorted(copy.rglob("*"))
    line = refused("ingest", "--corpus", str(corpus), "--random-init", "--store", str(copy))
    assert line == (
        f"Error: --store '{copy}': its atlas.duckdb is not a DuckDB database; remove it, and atlas writes it again "
        "over the runs in data/"
    )
    assert sorted(copy.rglob("*")) == before
    (copy / "atlas.duckdb").unlink()
    assert atlas.open(copy).runs()["run_id"].to_list() == atlas.open(store).runs()["run_id"].to_list()


def test_a_folder_holding_another_programs_database(corpus, tmp_path):
    """A DuckDB file of another program where the store's would be: the ingest is refused before it writes
    anything (it wrote its runs there and said so, and no command could open the store after)."""
    folder = tmp_path / "other"
    folder.mkdir()
    con = duckdb.connect(str(folder / "atlas.duckdb"))
    con.execute("CREATE TABLE runs (x INTEGER)")
    con.close()
    words = f"Error: --store '{folder}': its atlas.duckdb is another program's DuckDB database (no atlas_meta table)"
    assert refused("ingest", "--corpus", str(corpus), "--store", str(folder)).startswith(words)
    assert sorted(p.name for p in folder.iterdir()) == ["atlas.duckdb"]
    for args in (["runs"], ["query", "entropy"], ["sql", "SELECT 1"], ["grads", "--corpus", str(corpus)]):
        assert refused(*args, "--store", str(folder)).startswith(words)  # grads: before its gradients


def test_a_corpus_name_as_long_as_a_file_name_may_be(corpus, tmp_path):
    """The run id names folders: its readable start is cut to fit 255 bytes (it failed with errno 36 and left a
    half-made store); the same ingest again finds the run."""
    long = tmp_path / ("é" * 120 + ".conllu")  # 247 bytes of UTF-8
    shutil.copy(corpus, long)
    store = tmp_path / "store"
    first = atlas.ingest(long, store=store, progress=False)
    assert len(first.run_id.encode()) <= 255 and first.run_id.startswith("é" * 49 + "__all-MiniLM-L6-v2__")
    assert atlas.ingest(long, store=store, progress=False).already_present
    assert atlas.open(store).runs()["run_id"].to_list() == [first.run_id]


@pytest.mark.parametrize(
    ("entry", "given", "words"),
    [
        ("best head per dependency relation", "min_count=1e3", "expected a whole number"),
        ("best head per dependency relation", "min_count=''", "expected a whole number"),
        ("best head per dependency relation", "poss_rule=maybe", "expected true or false"),
        ("relative position", "threshold=nan", "expected a finite number"),
        ("relative position", "threshold=-inf", "expected a finite number"),
        ("relative position", "threshold=high", "expected a number"),
    ],
)
def test_query_parameters_of_the_wrong_kind(entry, given, words):
    name, value = given.split("=")
    with pytest.raises(AtlasError) as raised:
        resolve(entry).bind({name: value.strip("'")})
    assert str(raised.value) == f"{given}: {words}" and raised.value.cli_text() == f"--param {given}: {words}"


def test_query_parameters_as_their_defaults_are_written():
    entry = resolve("best head per dependency relation")
    bound = entry.bind({"min_count": " 7 ", "poss_rule": "False"})
    assert bound["min_count"] == 7 and bound["poss_rule"] is False and bound["direction"] == "both"
    assert resolve("relative position").bind({"threshold": "1e-1"})["threshold"] == 0.1


def test_patterns_refuse_a_model_they_would_not_use(store):
    line = refused("patterns", "--model", "elsewhere", "--store", str(store))
    assert line == "Error: --model: only the CNN of --labels runs the model; the rule reads the stored maps"


def test_a_parameter_given_twice(store):
    assert refused("query", "entropy", "--run", "a", "--param", "run=b", "--store", str(store)) == (
        "Error: --param run: the run is given by --run; give it once"
    )
    assert refused("query", "relative position", "--param", "threshold=0.1", "--param", "threshold=0.2") == (
        "Error: --param threshold: given twice; give each parameter once"
    )


def test_sql_that_is_not_utf8(store, tmp_path):
    utf16 = tmp_path / "q.sql"
    utf16.write_text("SELECT 1", encoding="utf-16")
    assert refused("sql", "-f", str(utf16), "--store", str(store)) == f"Error: {utf16}: not UTF-8 text"
    done = subprocess.run(
        [sys.executable, "-c", "from atlas.cli import main; main()", "sql", "-", "--store", str(store)],
        input=b"SELECT 1 -- caf\xe9",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.decode().strip() == "Error: standard input: not UTF-8 text"


def test_standard_output_closed(store):
    """atlas ... >&-: writing the answer is an error, said in one line; --out still writes."""
    code = "from atlas.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "sql", "SELECT 1", "--format", "csv", "--store", str(store)],
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 (the shell's >&-)
        stderr=subprocess.PIPE,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.decode().strip().startswith(
        "Error: [Errno 9] standard output is closed"
    )


def test_one_dev_example_of_a_regression_task(tmp_path):
    line = refused(
        "finetune",
        "--task",
        "STS-B",
        "--data",
        str(ROOT / "samples" / "glue" / "STS-B"),
        "--out",
        str(tmp_path / "ckpt"),
        "--epochs",
        "0",
        "--dev-limit",
        "1",
        "--store",
        str(tmp_path / "store"),
    )
    assert line == "Error: --dev-limit 1: STS-B's correlations need 2 or more dev examples"
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "store").exists()


def test_a_checkpoint_folder_that_cannot_be_made_is_refused_before_training(tmp_path):
    (tmp_path / "file").write_text("")
    for out, words in [
        (str(tmp_path / "file" / "ckpt"), f"'{tmp_path / 'file'}' is not a folder"),
        ("", "name the checkpoint folder"),
    ]:
        line = refused("finetune", "--task", "SST-2", "--data", str(SST2), "--out", out, "--store", str(tmp_path / "s"))
        assert line == f"Error: --out '{out}': {words}"


def test_an_ingest_that_keeps_no_input_stores_nothing(corpus, tmp_path):
    line = refused(
        "ingest", "--corpus", str(corpus), "--max-length", "3", "--quiet", "--store", str(tmp_path / "store")
    )
    assert line == f"Error: {corpus}: every input is longer than --max-length 3 pieces (2 skipped); nothing was stored"
    assert not (tmp_path / "store").exists()


def test_rm_removes_nothing_unless_every_run_is_found(store, corpus, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    (run_id,) = atlas.open(copy).runs()["run_id"].to_list()
    before = sorted(copy.rglob("*"))
    line = refused("rm", run_id, "nosuch", "--store", str(copy))
    assert line.startswith("Error: 'nosuch': no such run in ") and line.endswith("nothing was removed)")
    assert sorted(copy.rglob("*")) == before
    assert atlas.open(copy).remove(run_id, run_id) == {run_id: "run"}  # given twice: removed once
    assert atlas.open(copy).runs().is_empty()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--max-edges", "99999999999"], "Error: --max-edges 99999999999: expected 1 to 2,147,483,647"),
        (["--engine", "ray", "--gpus-per-worker", "nan"], "Error: --gpus-per-worker nan: expected 0 or more"),
    ],
)
def test_ingest_numbers_out_of_range(corpus, tmp_path, args, line):
    assert refused("ingest", "--corpus", str(corpus), *args, "--store", str(tmp_path / "store")) == line
    assert not (tmp_path / "store").exists()


def test_unfinished_runs_of_no_store(tmp_path):
    line = refused("runs", "--unfinished", "--store", str(tmp_path / "typo"))
    assert line == f"Error: --store '{tmp_path / 'typo'}': no store here (run 'atlas ingest' first)"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["query", "entropy", "--run", ""],
            "Error: --run '': empty; name a run (see 'atlas runs'); left out, it is the latest",
        ),
        (
            ["ingest", "--corpus", "c.conllu", "--model", " "],
            "Error: --model ' ': empty; name a hub id or a folder, or leave it out",
        ),
        (["ingest", "--corpus", ""], "Error: --corpus '': empty; name the file or folder"),  # not '.': a folder
        (["query", "entropy", "--out", ""], "Error: --out '': empty; name the file or folder"),
        (["plot", "entropy", "--out", ""], "Error: --out '': empty; name the file or folder"),
        (  # not the run's own model, unsaid
            ["distances", "--model", "", "--examples", "1"],
            "Error: --model '': empty; name a hub id or a folder, or leave it out",
        ),
    ],
    ids=["run", "model", "corpus", "out", "figure", "run's model"],
)
def test_an_empty_name_is_not_the_default(store, corpus, args, line):
    args = [str(corpus) if a == "c.conllu" else a for a in args]
    assert refused(*args, "--store", str(store)) == line


def test_an_empty_store_is_not_the_default(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default store would be made (a checkout may hold the demo's)
    monkeypatch.delenv("ATLAS_STORE", raising=False)
    assert refused("ingest", "--corpus", str(corpus), "--store", "") == (
        "Error: --store '': empty; name the store folder, or leave it out"
    )
    assert not (tmp_path / "atlas-store").exists()


def test_distances_counts_out_of_range(store):
    assert refused("distances", "--clusters", "100", "--store", str(store)) == (
        "Error: --clusters 100: the model has 72 heads; expected 72 clusters or fewer"
    )
    assert refused("distances", "--examples", str(2**64), "--store", str(store)) == (
        f"Error: --examples {2**64}: expected 9,223,372,036,854,775,807 or less"
    )


def test_a_corpus_that_can_be_read_only_once(tmp_path):
    fifo = tmp_path / "corpus.conllu"
    os.mkfifo(fifo)
    line = refused("ingest", "--corpus", str(fifo), "--store", str(tmp_path / "store"))
    assert line == f"Error: {fifo}: not a regular file (a pipe?); the corpus is read more than once: write it to a file"
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_config_value_that_is_not_finite(corpus, tmp_path, value):
    args = ["--random-init", "--config", f"layer_norm_eps={value}", "--store", str(tmp_path / "store")]
    line = refused("ingest", "--corpus", str(corpus), *args)
    assert line == f"Error: --config layer_norm_eps={value}: expected a finite number"


def test_describe_writes_no_file():
    assert refused("query", "entropy", "--describe", "--out", "d.csv") == (
        "Error: --describe: prints the entry's text, running nothing; leave out --out"
    )
    assert refused("query", "entropy", "--describe", "--param", "x=1", "--run", "r") == (
        "Error: --describe: prints the entry's text, running nothing; leave out --param, --run"
    )
    assert refused("query", "entropy", "--describe", "--engine", "spark") == (
        "Error: --describe: prints the entry's text, running nothing; leave out --engine"
    )
    described = CliRunner().invoke(cli, ["query", "entropy", "--describe", "--engine", "duckdb"])
    assert described.exit_code == 0 and described.output.startswith("-- name: entropy\n")  # the default, named


def test_an_output_under_a_file_names_the_file(store, tmp_path):
    """``--out`` whose folder is a file is said to be so, not a folder that does not exist."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("precious")
    for args in (["sql", "SELECT 1"], ["plot", "entropy"], ["report"]):
        out = a_file / "deeper" / f"x{'.png' if args[0] == 'plot' else '.html' if args[0] == 'report' else '.csv'}"
        line = refused(*args, "--store", str(store), "--out", str(out))
        assert line == f"Error: --out '{out}': '{a_file}' is a file, not a folder"
    out = a_file / "x" / "tables"
    assert (
        refused("export", "--store", str(store), "--out", str(out))
        == f"Error: --out '{out}': '{a_file}' is a file, not a folder"
    )
    assert (
        refused("export", "--store", str(store), "--out", str(a_file))
        == f"Error: --out: Directory '{a_file}' is a file."
    )
    assert a_file.read_text() == "precious"


def test_an_export_onto_a_folder_named_like_a_table(store, tmp_path):
    out = tmp_path / "tables"
    (out / "runs.parquet").mkdir(parents=True)
    line = refused("export", "--store", str(store), "--out", str(out))
    assert line == f"Error: --out '{out}': '{out}/runs.parquet' is a folder; the export would write a file there"
    assert sorted(p.name for p in out.iterdir()) == ["runs.parquet"]


def test_grads_of_a_folder(tmp_path):
    line = refused("grads", "--corpus", str(tmp_path))
    assert line == f"Error: --corpus '{tmp_path}': is a folder; name the corpus file"


@pytest.mark.parametrize(
    ("entry", "given", "words"),
    [
        ("attention sink", "threshold=1.5", "expected a share from 0 to 1"),
        ("relative position", "threshold=-0.1", "expected a share from 0 to 1"),
        ("fine-tuning change", "max_examples=0", "expected 1 or more"),
    ],
)
def test_query_parameters_out_of_range(store, entry, given, words):
    run = atlas.open(store).latest_run()
    runs = ["--param", f"base={run}", "--param", f"tuned={run}"] if entry == "fine-tuning change" else []
    line = refused("query", entry, "--store", str(store), "--param", given, *runs)
    assert line == f"Error: --param {given}: {words}"


def test_an_empty_glue_text_names_its_column(tmp_path):
    header = (ROOT / "samples" / "glue" / "MRPC" / "dev.tsv").read_text().splitlines()[0]
    path = tmp_path / "dev.tsv"
    path.write_text(f"{header}\n1\t1\t2\tA sentence.\t \n")
    line = refused(
        "ingest", "--corpus", str(path), "--format", "glue", "--task", "MRPC", "--store", str(tmp_path / "s")
    )
    assert line == f"Error: {path}:2: empty text in column '#2 String'"
    assert not (tmp_path / "s").exists()


def test_a_sample_seed_of_a_corpus_read_whole(corpus, tmp_path):
    line = refused("ingest", "--corpus", str(corpus), "--sample-seed", "3", "--store", str(tmp_path / "s"))
    drawn = "--format 'text', --format 'repeated' and --format 'needle'"
    assert line.startswith(f"Error: --sample-seed: seeds the draw of {drawn}; a conllu")
    assert not (tmp_path / "s").exists()


@pytest.mark.skipif(not Path("/dev/full").exists() or not Path("/proc/self").is_dir(), reason="Linux's /dev/full")
def test_a_file_the_system_will_not_write_is_named(store, tmp_path):
    """A full disk (/dev/full) or a folder that takes no files (/proc/self): one line naming --out and the
    system's reason, not the errno and the hidden temporary file's name."""
    st = ["--store", str(store)]
    result = CliRunner().invoke(cli, ["query", "entropy", *st, "--out", "/dev/full", "--format", "csv"])
    assert result.exit_code == 1 and "Traceback" not in result.output  # the answer's title, then the error
    assert result.output.splitlines()[-1] == "Error: --out '/dev/full': cannot write it (No space left on device)"
    line = refused("plot", "entropy", *st, "--out", "/proc/self/p.png")
    assert line == "Error: --out '/proc/self/p.png': cannot write it (No such file or directory)"
    line = refused("report", *st, "--out", "/proc/self/r.html", "--examples", "0", "--quiet")
    assert line == "Error: --out '/proc/self/r.html': cannot write it (No such file or directory)"
    line = refused("export", *st, "--out", "/proc/self/x")
    assert line == "Error: --out '/proc/self/x': cannot write it (No such file or directory)"
    with pytest.raises(AtlasError, match=r"^figure='/proc/self/p.png': cannot write it \(No such file or directory\)$"):
        atlas.open(store).answer("entropy", figure="/proc/self/p.png")


def test_an_error_of_the_query_is_not_blamed_on_the_file(store, tmp_path):
    """A query failing after its first batch is DuckDB's error, raised by its reader as an OSError without an
    errno: said as it is, and no file is left."""
    out = tmp_path / "x.csv"
    sql = "SELECT (CASE WHEN range < 200000 THEN range::VARCHAR ELSE 'x' || range END)::INTEGER FROM range(200010)"
    line = refused("sql", sql, "--store", str(store), "--out", str(out))
    assert line == "Error: Conversion Error: Could not convert string 'x200000' to INT32"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_path_in_the_api(store, tmp_path):
    """'' is refused as empty, as on the command line, not read as '.' (the working folder)."""
    words = "'': empty; name the file or folder"
    with pytest.raises(AtlasError, match=f"^corpus={words}$"):
        atlas.ingest("", store=tmp_path / "s", progress=False)
    st = atlas.open(store)
    with pytest.raises(AtlasError, match=f"^figure={words}$"):
        st.answer("entropy", figure="")
    with pytest.raises(AtlasError, match=f"^out={words}$"):
        st.report("")
    with pytest.raises(AtlasError, match=f"^labels={words}$"):
        st.patterns(labels="")
    assert not (tmp_path / "s").exists()


def test_a_run_given_as_a_parameter_is_named_as_given(store):
    """``--param run=R`` where R is no run: named as --param run, as the user gave it, not as --run."""
    assert refused("query", "entropy", "--param", "run=nosuch", "--store", str(store)) == (
        f"Error: --param run='nosuch': no such run in {store} (see 'atlas runs')"
    )
    assert refused("query", "entropy", "--run", "nosuch", "--store", str(store)).startswith("Error: --run 'nosuch'")
