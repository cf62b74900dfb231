"""atlas report: one self-contained HTML file (no URL in it), every entry with an answer for the run as a table
with its figure and the others listed with their reason, an explorer holding the stored edges of the chosen
inputs, two runs side by side; and in a real headless Chromium: no JavaScript error, the explorer draws a
head's lines, choosing another head or hovering a token changes them."""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import atlas
from atlas.catalogue import resolve
from atlas.cli import cli
from tests.conftest import EWT_SAMPLE, cut_conllu


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, str, str]:
    """A store with a pre-trained and a random-init run over the same 8 sentences."""
    root = tmp_path_factory.mktemp("report")
    corpus = cut_conllu(EWT_SAMPLE, 8, root / "eight.conllu")
    pretrained = atlas.ingest(corpus, store=root / "store", progress=False)
    random = atlas.ingest(corpus, store=root / "store", random_init=True, progress=False)
    return root / "store", pretrained.run_id, random.run_id


@pytest.fixture(scope="module")
def report(stores, tmp_path_factory) -> Path:
    store, run_id, _ = stores
    out = tmp_path_factory.mktemp("html") / "report.html"
    result = run_cli("report", "--store", str(store), "--run", run_id, "--examples", "5", "--out", str(out))
    assert result.exit_code == 0, result.output
    bar, said = result.output.rsplit("\r", 1)  # a progress bar over the entries (on stderr), then one line
    assert f"report:   0%|          | 0/{len(atlas.queries())} [" in bar, bar
    assert re.fullmatch(
        r" *wrote .*report\.html \(\d+\.\d MB\): \d+ catalogue entries, \d+ left out .*, 5 inputs .*\n", said
    ), result.output
    return out


@pytest.fixture(scope="module")
def compared(stores, tmp_path_factory) -> Path:
    store, run_id, random_id = stores
    with atlas.open(store) as st:
        return st.report(tmp_path_factory.mktemp("html") / "compare.html", run_id, 3, random_id).path


def payload(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="atlas-explorer-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def levels(example: dict, n_layers: int, n_heads: int) -> np.ndarray:
    n = len(example["tokens"])
    data = zlib.decompress(base64.b64decode(example["data"]))
    return np.frombuffer(data, dtype=np.uint8).reshape(n_layers, n_heads, n, n)


def test_self_contained_no_url(report, compared):
    for path in (report, compared):
        html = path.read_text()
        assert not re.search(r"(?i)https?:|ftp:|//[a-z0-9.-]+\.[a-z]{2,}/", html)
        assert "<link" not in html and "@import" not in html and "url(" not in html
        sources = re.findall(r'\ssrc="([^"]*)"', html)
        assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
        assert html.count("<script") == 2  # the explorer's data and its code, both inline


def test_entries_with_answers_and_the_reasons_for_the_others(report, stores):
    store, run_id, _ = stores
    html = report.read_text()
    assert run_id in html and "all-MiniLM-L6-v2" in html and "kept_mass" in html
    for name in ("special tokens", "relative position", "entropy", "best head per dependency relation"):
        anchor = re.sub(r"[^a-z0-9]+", "-", name)
        section = re.search(rf'<section class="entry" id="{anchor}">(.*?)</section>', html, re.S)
        assert section and "<table>" in section.group(1), name
        has_figure = bool(resolve(name).plot)  # best head per dependency relation is a table only
        assert ("data:image/png;base64," in section.group(1)) == has_figure, name
    with atlas.open(store) as st:
        first = st.query("special tokens", run=run_id).row(0)
    assert f"<td class=num>{first[2]:.4f}</td>" in html  # the answer's values, as the table shows them
    skipped = html[html.index('id="skipped"') :]
    assert "<b>head distances</b>" in skipped and "atlas distances --run" in skipped
    assert "<b>fine-tuning change</b>: compares two runs: give --compare RUN" in skipped
    assert 'id="head-distances"' not in html


def test_explorer_holds_the_stored_edges_of_the_chosen_inputs(report, stores):
    store, run_id, _ = stores
    data = payload(report.read_text())
    (run,) = data["runs"]
    assert run["run"] == run_id and [e["id"] for e in run["examples"]] == [0, 1, 2, 3, 4]
    with atlas.open(store) as st:
        for example in run["examples"]:
            stored = levels(example, run["layers"], run["heads"])
            for layer, head in ((1, 1), (4, 9), (6, 12)):
                found = st.attention(run=run_id, example=example["id"], layer=layer, head=head)
                weights, tokens = found.weights, found.tokens
                assert tokens == example["tokens"]
                assert np.array_equal(stored[layer - 1, head - 1], np.rint(weights * 255).astype(np.uint8))


def test_two_runs_side_by_side(compared, stores):
    _, run_id, random_id = stores
    html = compared.read_text()
    assert [r["run"] for r in payload(html)["runs"]] == [run_id, random_id]
    section = re.search(r'<section class="entry" id="special-tokens">(.*?)</section>', html, re.S).group(1)
    assert section.count('<div class="block">') == 2 and run_id in section and random_id in section
    assert section.count("data:image/png;base64,") == 2
    assert 'id="fine-tuning-change"' in html or "<b>fine-tuning change</b>" in html


def test_report_errors_are_one_line(stores, tmp_path):
    store, run_id, _ = stores
    cases = [
        (["--out", str(tmp_path / "r.pdf")], "the report is an HTML file"),
        (["--out", str(tmp_path / "no" / "r.html")], "does not exist"),
        (["--out", str(tmp_path / "r.html"), "--run", "nope"], "--run 'nope': no such run"),
        (["--out", str(tmp_path / "r.html"), "--compare", "nope"], "--compare 'nope': no such run"),
        (["--out", str(tmp_path / "r.html"), "--run", run_id, "--compare", run_id], "is the run reported on"),
    ]
    for args, message in cases:
        result = run_cli("report", "--store", str(store), *args)
        assert result.exit_code == 1 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_no_explorer_when_no_input_is_asked_for(stores, tmp_path, capsys):
    store, _, _ = stores
    with atlas.open(store) as st:
        written = st.report(tmp_path / "r.html", examples=0, progress=False)
    assert capsys.readouterr().err == ""  # no progress bar
    html = written.path.read_text()
    assert written.n_examples == 0 and 'id="atlas-explorer-data"' not in html and 'id="special-tokens"' in html
    assert written.size == len(html.encode()) and written.n_entries + written.n_skipped == len(atlas.queries())


# --- in a real browser ----------------------------------------------------------------------------------------


def open_page(driver, path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.explorer || ''"))
    assert driver.execute_script("return document.body.dataset.explorer") == "ready", driver.find_element(
        "id", "ex-status"
    ).text


def lines(driver, panel: int = 0) -> list[str]:
    return driver.execute_script(
        "const views = document.querySelectorAll('svg.head-view');"
        "return [...views[arguments[0]].querySelectorAll('line')].filter(l => l.style.visibility !== 'hidden')"
        ".map(l => l.dataset.src + '>' + l.dataset.dst + ':' + l.getAttribute('stroke-opacity'));",
        panel,
    )


def errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_explorer_in_a_browser(browser, report, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, report)
    run = payload(report.read_text())["runs"][0]
    example = run["examples"][0]
    stored = levels(example, run["layers"], run["heads"])
    first = lines(browser)
    assert len(first) == np.count_nonzero(stored[0, 0]) > 0  # layer 1, head 1: a line per stored weight
    Select(browser.find_element(By.ID, "ex-head")).select_by_value("4")
    fifth = lines(browser)
    assert browser.find_element(By.CSS_SELECTOR, "svg.head-view").get_attribute("data-head") == "5"
    assert fifth != first and len(fifth) == np.count_nonzero(stored[0, 4])
    thumbnail = browser.find_element(By.CSS_SELECTOR, 'canvas.thumb[data-layer="3"][data-head="7"]')
    thumbnail.click()
    assert Select(browser.find_element(By.ID, "ex-layer")).first_selected_option.text == "3"
    assert Select(browser.find_element(By.ID, "ex-head")).first_selected_option.text == "7"
    assert len(lines(browser)) == np.count_nonzero(stored[2, 6])
    token = browser.find_elements(By.CSS_SELECTOR, "svg.head-view text.token.src")[1]
    ActionChains(browser).move_to_element(token).perform()
    row = lines(browser)
    assert len(row) == np.count_nonzero(stored[2, 6, 1]) and all(line.startswith("1>") for line in row)
    assert "active" in token.get_attribute("class")
    Select(browser.find_element(By.ID, "ex-example")).select_by_value(str(run["examples"][2]["id"]))
    tokens = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.head-view text.token.src")]
    assert tokens == run["examples"][2]["tokens"]
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes().startswith(b"\x89PNG")
    assert errors(browser) == []


def test_two_runs_in_a_browser(browser, compared, tmp_path):
    open_page(browser, compared)
    assert len(browser.find_elements("css selector", "svg.head-view")) == 2
    assert lines(browser, 0) and lines(browser, 1) and lines(browser, 0) != lines(browser, 1)
    assert browser.save_screenshot(str(tmp_path / "compare.png"))
    assert errors(browser) == []
