"""What the store promises: a copy reads its own files from any working directory (atlas and the DuckDB
CLI alike), a read-only store answers every query and is left byte-identical, one process writes at a
time, and publishing a run while another process holds the database neither fails nor disagrees."""

from __future__ import annotations

import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from atlas.catalogue import entries
from atlas.cli import cli
from atlas.store import Store, table_schemas, to_table
from tests.conftest import EWT_SAMPLE, as_older_layout, cut_conllu

ROOT = Path(__file__).resolve().parent.parent
DUCKDB_CLI = shutil.which("duckdb", path=str(Path(sys.executable).parent)) or shutil.which("duckdb")


def atlas(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def state(root: Path) -> dict[str, tuple]:
    """Every path under root with its bytes and modification time (a folder: its mtime)."""
    out = {}
    for p in sorted(root.rglob("*")):
        info = p.stat()
        out[str(p.relative_to(root))] = (p.read_bytes() if p.is_file() else b"", info.st_mtime_ns)
    return out


def duckdb_cli(db: str, sql: str, cwd: Path, *, user: list[str] | None = None) -> str:
    done = subprocess.run(
        [*(user or []), DUCKDB_CLI, db, "-readonly", "-csv", "-noheader", "-c", sql],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("integrity") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 8, root.parent / "eight.conllu")
    assert atlas("ingest", "--corpus", str(corpus), "--store", str(root), "--quiet").exit_code == 0
    return root


@pytest.fixture(scope="module")
def n_tokens(store_dir) -> int:
    return Store(store_dir).connect().execute("SELECT count(*) FROM tokens").fetchone()[0]


def test_columns_declared_not_null_are_required_in_the_files(store_dir):
    """What schema.sql declares NOT NULL is a required column in every file of the run (what the writer encodes
    without validity levels); everything else stays optional, and a NULL where none may be is refused."""
    for name, schema in table_schemas().items():
        for path in (store_dir / "data").glob(f"*/{name}/*.parquet"):  # the run id: its folder's, in no file
            required = {f.name for f in pq.read_schema(path) if not f.nullable}
            assert required == {f.name for f in schema if not f.nullable} - {"run_id"}, path
    assert {f.name for f in table_schemas()["attn_rows"] if f.nullable} == {"to_first", "value_norm"}
    with pytest.raises(ValueError, match="attn_edges.weight: NULL in a column declared NOT NULL"):
        keys = {"run_id": "r", "example_id": 0, "layer": 0, "head": 0, "src_tok": 0, "dst_tok": [0, 1]}
        to_table("attn_edges", keys | {"weight": [0.5, None]}, 2)


def test_views_hold_no_absolute_path(store_dir):
    sql = " ".join(r[0] for r in Store(store_dir).connect().execute("SELECT sql FROM duckdb_views()").fetchall())
    assert str(store_dir) not in sql and str(store_dir.resolve()) not in sql and "data/run_id=*/tokens/*.parquet" in sql


def test_a_copy_reads_its_own_files_from_any_directory(store_dir, n_tokens, tmp_path):
    original = tmp_path / "original"
    shutil.copytree(store_dir, original)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    shutil.rmtree(original)  # a copy that still read the original would now fail or count nothing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sql = "SELECT count(*) FROM tokens"
    assert duckdb_cli(str(copy / "atlas.duckdb"), sql, elsewhere) == str(n_tokens)
    assert duckdb_cli("copy/atlas.duckdb", sql, tmp_path) == str(n_tokens)
    assert duckdb_cli("atlas.duckdb", sql, copy) == str(n_tokens)
    result = atlas("sql", sql, "--store", str(copy), "--format", "csv")
    assert result.exit_code == 0 and result.stdout.split()[1] == str(n_tokens)


def _read_only_tree(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def read_only_copy(store_dir) -> Iterator[Path]:
    """A copy of the store with no write permission anywhere, in a folder every user can read."""
    parent = Path(tempfile.mkdtemp(prefix="atlas-ro-"))
    parent.chmod(0o755)
    copy = parent / "store"
    shutil.copytree(store_dir, copy)
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    _read_only_tree(copy)
    yield copy
    for p in [copy, *copy.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    shutil.rmtree(parent)


def test_a_read_only_store_answers_every_query_and_is_left_as_it_was(read_only_copy, n_tokens):
    before = state(read_only_copy)
    for name in table_schemas():
        result = atlas("sql", f"SELECT count(*) AS n FROM {name}", "--store", str(read_only_copy), "--format", "csv")
        assert result.exit_code == 0, (name, result.output)
    for entry in entries():
        params = ("--param", "base=x", "--param", "tuned=x") if entry.name == "fine-tuning change" else ()
        result = atlas("query", entry.name, "--store", str(read_only_copy), "--format", "csv", *params)
        # an answer, or a one-line refusal about the store's content: never a failure to open or write
        assert result.exit_code in (0, 1), (entry.name, result.output)
        assert "cannot open" not in result.output and "read-only" not in result.output.lower(), result.output
        assert "Permission" not in result.output and "Traceback" not in result.output, result.output
    assert duckdb_cli(str(read_only_copy / "atlas.duckdb"), "SELECT count(*) FROM tokens", ROOT) == str(n_tokens)
    assert state(read_only_copy) == before


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _as_nobody(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([*NOBODY, *args], cwd=cwd, capture_output=True, text=True, env=env)


def test_a_read_only_store_as_a_user_who_cannot_write_it(read_only_copy, n_tokens):
    """Root writes through permissions, so the store is also read as the user nobody: the DuckDB shell and
    atlas answer, and 'atlas rm' is refused in one line. Nobody must reach this Python and the DuckDB shell:
    a checkout inside a private folder (mode 0700) leaves them out of its reach, and the check is skipped."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as another user")
    here = read_only_copy.parent  # a folder every user can enter
    reach = _as_nobody([sys.executable, "-c", "import atlas.cli"], here)
    shell = _as_nobody([DUCKDB_CLI, "-version"], here)
    if reach.returncode != 0 or shell.returncode != 0:
        why = (reach.stderr or shell.stderr).strip().splitlines()[-1:]
        pytest.skip(f"the user nobody cannot run this checkout's Python or DuckDB shell: {' '.join(why)}")
    before = state(read_only_copy)
    db = str(read_only_copy / "atlas.duckdb")
    assert duckdb_cli(db, "SELECT count(*) FROM tokens", Path("/"), user=NOBODY) == str(n_tokens)
    sql = "SELECT count(*) AS n FROM words"
    done = _as_nobody([sys.executable, "-m", "atlas.cli", "sql", sql, "--store", db.removesuffix("/atlas.duckdb"),
                       "--format", "csv"], here)  # fmt: skip
    assert done.returncode == 0 and int(done.stdout.split()[1]) > 0, done.stderr
    run_id = Store(read_only_copy).run_ids()[0]
    done = _as_nobody([sys.executable, "-m", "atlas.cli", "rm", run_id, "--store", str(read_only_copy)], here)
    assert done.returncode == 1 and "cannot write to this store (Permission denied)" in done.stderr, done.stderr
    assert state(read_only_copy) == before


HOLD_LOCK = """
import sys
from pathlib import Path
from atlas.store import Store
with Store(Path(sys.argv[1])).writing():
    print("held", flush=True)
    sys.stdin.read()
"""

HOLD_CONNECTION = """
import sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.execute("SELECT count(*) FROM runs").fetchone()[0], flush=True)
sys.stdin.readline()
print(con.execute("SELECT count(*) FROM runs").fetchone()[0], flush=True)
"""


def _hold(script: str, arg: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, arg], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    proc.first_line = proc.stdout.readline().strip()
    return proc


def test_one_writer_at_a_time_readers_never_wait(store_dir, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store_dir, copy)
    corpus = cut_conllu(EWT_SAMPLE, 3, tmp_path / "three.conllu")
    holder = _hold(HOLD_LOCK, str(copy))
    try:
        assert holder.first_line == "held"
        before = state(copy)
        result = atlas("ingest", "--corpus", str(corpus), "--store", str(copy), "--quiet")
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
        assert f"another atlas process is writing to this store (pid {holder.pid})" in result.output
        assert atlas("rm", Store(copy).run_ids()[0], "--store", str(copy)).exit_code == 1
        assert atlas("sql", "SELECT count(*) FROM runs", "--store", str(copy)).exit_code == 0  # readers go on
        assert state(copy) == before
    finally:
        holder.communicate("")
    result = atlas("ingest", "--corpus", str(corpus), "--store", str(copy), "--quiet")
    assert result.exit_code == 0, result.output


def test_publishing_while_another_process_holds_the_database(store_dir, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store_dir, copy)
    corpus = cut_conllu(EWT_SAMPLE, 4, tmp_path / "four.conllu")
    reader = _hold(HOLD_CONNECTION, str(copy / "atlas.duckdb"))
    try:
        assert reader.first_line == "1"
        result = atlas("ingest", "--corpus", str(corpus), "--store", str(copy), "--quiet")
        assert result.exit_code == 0, result.output  # nothing to write in atlas.duckdb: no 'Could not set lock'
        seen, _ = reader.communicate("\n")
    finally:
        reader.kill()
    assert seen.strip() == "2"  # the other process's open connection sees the new run at once
    assert len(Store(copy).run_ids()) == 2


def test_a_run_written_before_roles_and_first_token_answers_as_now(store_dir, tmp_path):
    """Runs written before tokens.role and attn_rows.to_first (their files lack the columns) get both derived
    in the views, exactly: every entry answers them as it answers the same run written now."""
    import pyarrow.parquet as pq

    old = tmp_path / "old"
    shutil.copytree(store_dir, old)
    for table, column in (("tokens", "role"), ("attn_rows", "to_first")):
        for part in old.glob(f"data/run_id=[!.]*/{table}/*.parquet"):  # the runs' files, not the .schema ones
            pq.write_table(pq.read_table(part).drop_columns([column]), part)
    assert Store(old).connect().execute("SELECT count(*) FROM tokens WHERE role = 'cls'").fetchone()[0] > 0
    answered = _answers_as_now(old, store_dir)
    assert {"attention sink", "entropy", "feature attention", "special tokens"} <= answered, answered


def test_a_store_written_before_the_run_partitions_answers_exports_and_compares_as_now(store_dir, n_tokens, tmp_path):
    """A store as atlas wrote it before the runs' Hive partitions (data/<run_id>/, the run id in every file): its
    views read it as they did until atlas opens it where it can write; then its runs' files are written again
    without the run id (the same rows otherwise) and their folders renamed, and every entry answers as on the store
    written now, its export holds the same rows, and a run ingested into it now compares with the older one as two
    runs written now do."""
    import duckdb

    old, now = tmp_path / "old", tmp_path / "now"
    shutil.copytree(store_dir, old)
    shutil.copytree(store_dir, now)
    as_older_layout(old)
    (run_id,) = Store(store_dir).run_ids()
    assert Store(old).run_ids() == [run_id]  # listed before any writer renamed its folder
    files = {p.relative_to(old / "data" / run_id): pq.read_table(p) for p in (old / "data" / run_id).rglob("*.parquet")}
    con = duckdb.connect(str(old / "atlas.duckdb"), read_only=True)  # the older views, as an older shell reads them
    assert con.execute("SELECT count(*), any_value(run_id) FROM tokens").fetchone() == (n_tokens, run_id)
    con.close()
    listed = atlas("runs", "--store", str(old))  # the first atlas to open it where it can write brings it over, once
    assert listed.exit_code == 0 and "an older atlas; its 1 run(s) moved to the run partitions" in listed.output
    assert "moved to the run partitions" not in atlas("runs", "--store", str(old)).output
    answered = _answers_as_now(old, store_dir)
    assert {"attention sink", "entropy", "best head per dependency relation"} <= answered, answered
    folder = old / "data" / f"run_id={run_id}"
    assert sorted(p.name for p in (old / "data").iterdir()) == ["run_id=.schema", folder.name]
    for part, table in files.items():  # written again without the run id, the same rows otherwise
        assert pq.read_table(folder / part).equals(table.drop_columns(["run_id"])), part
    for store in (old, now):
        out = str(tmp_path / f"{store.name}-export")
        assert atlas("export", "--out", out, "--store", str(store), "--quiet").exit_code == 0
    for table in table_schemas():  # the same rows, in any order
        a, b = (f"'{tmp_path / f'{name}-export' / f'{table}.parquet'}'" for name in ("old", "now"))
        rows = duckdb.sql(f"SELECT count(*) FROM {a}").fetchone()[0]
        assert rows == duckdb.sql(f"SELECT count(*) FROM {b}").fetchone()[0], table
        assert duckdb.sql(f"SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})").fetchone()[0] == 0, table
        assert pq.read_schema(a.strip("'")) == pq.read_schema(b.strip("'")), table
    corpus = cut_conllu(EWT_SAMPLE, 8, tmp_path / "eight.conllu")
    compared = []
    for store in (old, now):
        done = atlas("ingest", "--corpus", str(corpus), "--store", str(store), "--dense", "--quiet")
        assert done.exit_code == 0, done.output
        (dense,) = set(Store(store).run_ids()) - {run_id}
        compared.append(atlas("query", "entropy", "--store", str(store), "--run", run_id, "--compare", dense,
                              "--format", "csv"))  # fmt: skip
    assert compared[0].exit_code == 0 and _same(_cells(compared[0].output), _cells(compared[1].output))
    assert len(_cells(compared[0].output)) > 100


def test_an_older_store_brought_over_by_a_writer_reads_through_its_views_at_once(store_dir, n_tokens, tmp_path):
    """A writer that brings an older store over (an ingest's first step: no connection) rewrites its views too: the
    DuckDB shell reads the runs, run ids included, before any atlas connects."""
    import duckdb

    old = tmp_path / "old"
    shutil.copytree(store_dir, old)
    as_older_layout(old)
    (run_id,) = Store(store_dir).run_ids()
    with Store(old).writing():
        pass
    assert not Store(old).older_layout()
    con = duckdb.connect(str(old / "atlas.duckdb"), read_only=True)
    counted = con.execute("SELECT count(*), count(run_id), any_value(run_id) FROM attn_rows").fetchone()
    con.close()
    assert counted[1:] == (counted[0], run_id) and counted[0] > n_tokens


def _answers_as_now(old: Path, store_dir: Path) -> set[str]:
    """Every entry answers (or refuses) on the store at ``old`` as on the store written now; the entries answered."""
    answered = set()
    for entry in entries():
        if entry.name == "fine-tuning change":
            continue
        now = atlas("query", entry.name, "--store", str(store_dir), "--format", "csv")
        before = atlas("query", entry.name, "--store", str(old), "--format", "csv")
        assert before.exit_code == now.exit_code, (entry.name, before.output)
        assert _same(_cells(before.output), _cells(now.output)), entry.name
        if now.exit_code == 0:
            answered.add(entry.name)
    return answered


def _cells(output: str) -> list[float | str]:
    """Every cell of a CSV answer, numbers as floats (DuckDB's parallel sums may differ in the last bits)."""
    cells: list[float | str] = []
    for cell in output.replace("\n", ",").split(","):
        try:
            cells.append(float(cell))
        except ValueError:
            cells.append(cell)
    return cells


def _same(a: list[float | str], b: list[float | str]) -> bool:
    return len(a) == len(b) and all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12))
        for x, y in zip(a, b, strict=True)
    )


@contextmanager
def held(store: Path, read_only: bool) -> Iterator[None]:
    """The store's DuckDB file held open by another process (as a DuckDB shell holds it) while the block runs."""
    code = (
        f"import duckdb, sys; c = duckdb.connect({str(store / 'atlas.duckdb')!r}, read_only={read_only}); "
        "print('ready', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield
    finally:
        holder.communicate("")


def test_a_shell_holding_the_store_read_write_is_said_so_with_the_way_beside_it(store_dir, tmp_path):
    """A DuckDB shell opened read-write locks atlas out: the one line says so and names -readonly."""
    store_dir = Path(shutil.copytree(store_dir, tmp_path / "store"))  # a store this process has not opened
    with held(store_dir, read_only=False):
        result = atlas("runs", "--store", str(store_dir))
        assert result.exit_code == 1 and "Conflicting lock" in result.output
        assert result.output.strip().endswith("a DuckDB shell beside atlas opens the store with -readonly)")
    assert atlas("runs", "--store", str(store_dir)).exit_code == 0  # the lock let go


def test_a_read_only_shell_lets_atlas_answer_with_macros_to_rewrite(store_dir, tmp_path):
    """With a -readonly shell open, atlas answers where it would rewrite the macros (a catalogue changed since):
    they wait for a writer, as they do beside another writer."""
    store_dir = Path(shutil.copytree(store_dir, tmp_path / "store"))
    con = Store(store_dir)._open(read_only=False)
    con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('macros_state', 'older')")
    con.close()
    with held(store_dir, read_only=True):
        result = atlas("query", "entropy", "--store", str(store_dir), "--format", "csv")
        assert result.exit_code == 0 and result.stdout.startswith("layer,head,entropy"), result.output
    atlas("runs", "--store", str(store_dir))  # no shell now: the macros are rewritten
    con = Store(store_dir)._open(read_only=True)
    assert con.execute("SELECT value FROM atlas_meta WHERE key = 'macros_state'").fetchone()[0] != "older"
    con.close()
