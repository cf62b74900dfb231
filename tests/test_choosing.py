"""How a phrase chooses a catalogue entry and how an entry refuses: close words that choose an entry say which,
before anything else is printed or refused; a phrase that fits several entries about equally lists them and
runs none; an entry whose name holds the phrase's words ranks first. An entry's own refusal (DuckDB's
``error()`` in its SQL) is one line like every prerequisite's, with no engine class or file name in it; an
unexpected engine error names the entry."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import atlas
from atlas.catalogue import Entry, choose, entries, resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, cut_conllu

HEADLINE = "best head per dependency relation"


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sparse(tmp_path_factory) -> tuple[Path, str]:
    """A store of one sparse run (the default kept mass) of a few sentences, and the run."""
    root = tmp_path_factory.mktemp("choosing") / "store"
    corpus = cut_conllu(EWT_SAMPLE, 6, root.parent / "six.conllu")
    result = run_cli("ingest", "--corpus", str(corpus), "--store", str(root), "--quiet")
    assert result.exit_code == 0, result.output
    return root, result.output.split()[1].rstrip(":")


# choosing


def test_a_name_or_an_alias_chooses_without_a_word():
    for entry in entries():
        for label in (entry.name, *entry.aliases):
            assert choose(label) == (entry, None), label
            assert choose(label.upper().replace(" ", "-")) == (entry, None), label


def test_close_words_choose_and_say_which():
    for phrase, name in (
        ("best head", HEADLINE),  # the name holds the words; 'ablation summary' only an alias ('best head gain')
        ("dependency relation heads", HEADLINE),
        ("relation heads", HEADLINE),
        ("entopy", "entropy"),
        ("coreferense heads", "coreference heads"),
        ("sink", "attention sink"),
        ("which heads attend to commas", "special tokens"),  # no label holds 'commas': its description does
        ("what does sep attend to", "sep to sep"),
    ):
        entry, said = choose(phrase)
        assert entry.name == name, phrase
        assert said == f"'{phrase}': taken as '{name}' (see 'atlas queries')"
    assert resolve("best head").name == HEADLINE


def test_a_phrase_fitting_several_entries_lists_them_and_chooses_none():
    for phrase, listed in (
        ("heads", ["best head per dependency relation", "coreference heads", "frame heads", "head ablation"]),
        ("probe", ["probe results", "probe weights"]),
        ("ablation", ["ablation summary", "head ablation", "layer ablation"]),
        ("figure 2", ["attention sink", "special tokens", "pattern shares"]),
    ):
        with pytest.raises(AtlasError, match=f"^'{phrase}' fits several entries about equally: ") as raised:
            choose(phrase)
        names = re.findall(r"'([^']+)'", str(raised.value).split(": ", 1)[1])
        assert set(listed) <= set(names), (phrase, names)
        assert "taken as" not in str(raised.value) and "\n" not in str(raised.value)


def test_unknown_words_list_the_nearest_the_name_holding_the_words_first():
    with pytest.raises(
        AtlasError, match=r"^no catalogue entry matches 'frobnicate the widgets' \(see atlas.queries\(\)\)$"
    ):
        choose("frobnicate the widgets")  # no entry holds any of the words: none is near, none is listed
    with pytest.raises(AtlasError, match=r"^no catalogue entry matches 'attention frobnicate'; nearest: 'attention"):
        choose("attention frobnicate")
    with pytest.raises(AtlasError, match=r"nearest: 'best head per dependency relation'; ") as raised:
        choose("best head accuracy")  # no label holds all three words; the name holds two, an alias too
    assert "\n" not in str(raised.value)


def test_the_command_line_says_the_choice_first(sparse):
    store, _ = sparse
    result = run_cli("query", "best head", "--store", str(store), "--format", "csv")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"'best head': taken as '{HEADLINE}' (see 'atlas queries')"
    assert lines[1].startswith(f"{HEADLINE} (Clark et al. 2019")
    assert result.stdout.startswith("relation,n,best_head,")
    exact = run_cli("query", HEADLINE, "--store", str(store), "--format", "csv")
    assert exact.exit_code == 0 and exact.stderr.splitlines()[0].startswith(f"{HEADLINE} (Clark")


def test_the_choice_is_said_before_a_refusal(sparse):
    store, _ = sparse
    result = run_cli("query", "probe weight", "--store", str(store))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "'probe weight': taken as 'probe weights' (see 'atlas queries')",
        result.stderr.splitlines()[1],
    ]
    assert result.stderr.splitlines()[1].startswith("Error: no probe was trained on run ")
    described = run_cli("query", "probe weight", "--describe")
    assert described.exit_code == 0 and described.stderr.startswith("'probe weight': taken as 'probe weights'")
    assert described.stdout.startswith("-- name: probe weights\n")
    ambiguous = run_cli("query", "probe", "--store", str(store))
    assert ambiguous.exit_code == 1 and ambiguous.stderr.startswith("Error: 'probe' fits several entries")
    assert len(ambiguous.stderr.strip().splitlines()) == 1


def test_the_api_says_the_choice_as_a_note(sparse):
    store, _ = sparse
    with atlas.open(store) as st:
        with pytest.warns(atlas.AtlasNote, match=r"^'probe weight': taken as 'probe weights'"):
            with pytest.raises(AtlasError, match="no probe was trained"):
                st.query("probe weight")
        with warnings.catch_warnings():
            warnings.simplefilter("error", atlas.AtlasNote)
            assert not st.query(HEADLINE, min_count=1).is_empty()  # a name: nothing said


# refusals


def test_an_entry_refuses_in_one_line_without_the_engine_or_the_file(sparse):
    store, run = sparse
    for phrase in ("token to token", "cls attention by feature"):
        entry = resolve(phrase)
        with pytest.raises(AtlasError) as raised:
            run_entry(Store(store).connect(), entry, entry.bind({"run": run}))
        text = raised.value.cli_text()
        assert text.startswith(f"run {run} is sparse: {phrase} reads single") and text.endswith("--dense")
        assert str(raised.value).endswith("ingest with dense=True")  # the API's words
        assert "Error" not in text and ".sql" not in text and "\n" not in text
        result = run_cli("query", phrase, "--store", str(store))  # refused by the header's need before the SQL runs
        said = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(said) == 1 and said[0].endswith("ingest with --dense")
        assert said[0].startswith(f"Error: run {run} is sparse: {phrase} reads single")


def test_a_bad_parameter_value_is_named_as_each_surface_names_it(sparse):
    store, _ = sparse
    with atlas.open(store) as st, pytest.raises(AtlasError) as raised:
        st.query(HEADLINE, direction="sideways")
    want = ": expected both, dependent -> head or head -> dependent"
    assert str(raised.value) == f"direction=sideways{want}"
    result = run_cli("query", HEADLINE, "--store", str(store), "--param", "direction=sideways")
    assert result.exit_code == 1 and result.output.strip() == f"Error: --param direction=sideways{want}"


def test_every_refusal_in_the_sql_is_marked_for_atlas():
    for entry in entries():
        for text in re.findall(r"\berror\(\s*(?:concat\(\s*)?'((?:[^']|'')*)'", entry.sql):
            assert text.startswith("atlas: "), (entry.name, text)
            for name in re.findall(r"\$(\w+)", text):
                assert name in {p.name for p in entry.parameters}, (entry.name, name)


def test_an_unexpected_engine_error_names_the_entry_not_the_file(sparse):
    store, _ = sparse
    entry = Entry("demo entry", (), "Paper 2019", "a demo", (), (), "SELECT no_such_column FROM runs", Path("x.sql"))
    with pytest.raises(AtlasError) as raised:
        run_entry(Store(store).connect(), entry, {})
    text = str(raised.value)
    assert text.startswith("'demo entry': Referenced column \"no_such_column\" not found"), text
    assert "Binder Error" not in text and "x.sql" not in text and "\n" not in text


def test_describe_gives_the_entry_file_whole():
    """Its header, wrapped as written, once (the description was printed again as one line of 1,200
    characters), then its SQL."""
    entry = resolve("entropy")
    text = atlas.describe("entropy")
    assert text == entry.sql.rstrip("\n") and text.startswith("-- name: entropy\n")
    assert all(len(line) <= 120 for line in text.splitlines()) and text.count("-- description:") == 1
