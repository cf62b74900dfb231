"""atlas serve: the read-only web application over a store, over plain HTTP (Starlette's TestClient) and in a
real browser (headless Chromium, the server on 127.0.0.1): entries answered with their parameters, the example
search and its head views, the head pages, refusals in one line with a 4xx status, and nothing loaded from
elsewhere."""

from __future__ import annotations

import html
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import uvicorn  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import atlas  # noqa: E402
from atlas.cli import AtlasGroup  # noqa: E402
from atlas.cli_serve import serve  # noqa: E402
from atlas.serve import app, entries, examples  # noqa: E402
from atlas.serve.heads import HEAD_ENTRIES  # noqa: E402
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu, make_store  # noqa: E402

SENTENCES = 40


@pytest.fixture(scope="module")
def store(tmp_path_factory, model) -> tuple[Path, str, str]:
    """A store of two runs over the sample's first sentences: a sparse run, then a dense one (the latest)."""
    folder = tmp_path_factory.mktemp("serve")
    corpus = cut_conllu(EWT_SAMPLE, SENTENCES, folder / "ewt.conllu")
    _, sparse = make_store(folder / "store", corpus, model)
    _, dense = make_store(folder / "store", corpus, model, kept_mass=None)
    return folder / "store", sparse, dense


@pytest.fixture(scope="module")
def client(store) -> TestClient:
    return TestClient(app(store[0]))


@pytest.fixture(scope="module")
def server(store) -> Iterator[str]:
    """The application served by uvicorn on 127.0.0.1 (a free port) in a thread; its origin. Stopped after."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    running = uvicorn.Server(uvicorn.Config(app(store[0]), log_level="warning"))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        running.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


def said(page: str) -> str:
    """The one line an error page says."""
    found = re.findall(r'<p class="error">(.*?)</p>', page)
    assert len(found) == 1, page
    return html.unescape(found[0])


def links_outside(page: str) -> list[str]:
    """The addresses a page loads or leads to that are not its own server's (the SVG namespace is no address)."""
    addresses = re.findall(r'(?:src|href|action)="([^"]*)"', page)
    return [a for a in addresses if re.match(r"(?i)([a-z][a-z0-9+.-]*:)?//", a)]


# --- plain HTTP --------------------------------------------------------------------------------------------------


def test_runs_page_lists_the_runs(client, store):
    page = client.get("/")
    assert page.status_code == 200
    assert store[1] in page.text and store[2] in page.text and "(latest)" in page.text
    assert links_outside(page.text) == []


def test_entry_answers_with_a_parameter_its_notes_and_figure(client, store):
    page = client.get("/entry/relative position", params={"threshold": "0.4", "run": store[1][:-3]})
    assert page.status_code == 200
    text = page.text
    assert f"run <b>{store[1]}</b>" in text  # the run named by a start of its id
    assert 'name="threshold" value="0.4"' in text and text.count("<tr>") > 10
    assert links_outside(text) == []
    drawn = client.get(html.unescape(re.search(r'<img class="figure" [^>]*src="([^"]+)"', text).group(1)))
    assert drawn.headers["content-type"] == "image/png" and drawn.content.startswith(b"\x89PNG")
    assert client.get("/entry/relative position/figure.png", params={"threshold": "x"}).status_code == 400
    assert client.get("/entry/probe results/figure.png").status_code == 404  # an entry without a figure
    latest = client.get("/entry/special tokens").text
    assert f"run <b>{store[2]}</b> (no run named: the store&#x27;s latest; it holds 1 other)" in latest
    assert "note: run " + store[2] in html.unescape(latest)  # the answer's own note, said on the page


def test_unknown_entry_is_404(client):
    page = client.get("/entry/no such thing")
    assert page.status_code == 404
    assert said(page.text).startswith("no catalogue entry named 'no such thing'")


def test_bad_run_and_parameter_are_400_in_one_line(client, store):
    page = client.get("/entry/entropy", params={"run": "zzz"})
    assert page.status_code == 400
    assert said(page.text) == f"--run 'zzz': no such run in {store[0]} (see 'atlas runs')"
    both = said(client.get("/entry/entropy", params={"run": "ewt"}).text)
    assert both.startswith("--run 'ewt': the start of 2 runs")
    page = client.get("/entry/relative position", params={"threshold": "high"})
    assert page.status_code == 400 and said(page.text) == "--param threshold=high: expected a number"
    page = client.get("/entry/entropy", params={"depth": "3"})
    assert page.status_code == 400 and "'entropy' has no such parameter" in said(page.text)
    assert client.get("/examples", params={"run": "zzz"}).status_code == 400
    assert client.get("/head/1-1", params={"run": "zzz"}).status_code == 400


def test_an_entry_that_cannot_answer_says_why(client):
    page = client.get("/entry/glue baselines")
    assert page.status_code == 422 and "atlas finetune" in said(page.text)
    asked = client.get("/entry/fine-tuning change")  # two runs to give first: the form, no answer yet
    assert asked.status_code == 200 and "give base and tuned to answer" in asked.text
    assert "the runs it reads are its parameters base, tuned" in asked.text  # not a run it does not read
    assert "it answers over every run" in page.text  # glue baselines: the store's task models, every run


def test_answer_pages(client, store, monkeypatch):
    monkeypatch.setattr(entries, "PER_PAGE", 10)
    run = {"run": store[2]}
    first = client.get("/entry/entropy", params=run).text
    second = client.get("/entry/entropy", params={**run, "page": "2"}).text
    with atlas.open(store[0]) as st:
        n = len(st.query("entropy", run=store[2]))
    rows = [re.findall(r"<tr><td class=num>(\d+)</td><td class=num>(\d+)</td>", p) for p in (first, second)]
    assert len(rows[0]) == len(rows[1]) == 10 and rows[0] != rows[1]
    assert f"rows 1 to 10 of {n}" in first and f"rows 11 to 20 of {n}" in second
    assert 'class="next"' in first and 'class="prev"' not in first and 'class="prev"' in second
    beyond = client.get("/entry/entropy", params={**run, "page": "99"})
    assert beyond.status_code == 400 and said(beyond.text) == f"page 99: the answer has {-(-n // 10)} pages"
    assert client.get("/entry/entropy", params={**run, "page": "0"}).status_code == 400


def test_sql_box_reads_and_refuses_writes(client, store, monkeypatch):
    page = client.get("/sql", params={"q": "SELECT run_id, n_examples FROM runs ORDER BY run_id"})
    assert page.status_code == 200 and store[1] in page.text and "2 rows" in page.text
    for statement, kind in (
        ("DROP VIEW runs", "DROP"),
        ("DELETE FROM runs", "DELETE"),
        ("COPY runs TO 'x.csv'", "COPY"),
    ):
        page = client.get("/sql", params={"q": statement})
        assert page.status_code == 400
        assert said(page.text) == f"sql: only read-only SELECT statements are accepted, not {kind}"
    assert client.get("/sql", params={"q": "SELECT nothing FROM runs"}).status_code == 400
    with atlas.open(store[0]) as st:
        assert len(st.runs()) == 2 and st.sql("SELECT count(*) AS n FROM runs")["n"].item() == 2  # nothing dropped
    monkeypatch.setattr("atlas.serve.sql.SQL_SECONDS", 0.2)  # a statement past the limit is stopped, in one line
    slow = "SELECT sum(hash(i)) FROM range(100000000000) t(i)"
    page = client.get("/sql", params={"q": slow})
    assert page.status_code == 400 and said(page.text).startswith("sql: stopped after 0.2 s, the SQL box's limit")
    assert client.get("/sql", params={"q": "SELECT 1 AS one"}).status_code == 200  # the connection answers again


def test_search_pages_and_head_filter(client, store, monkeypatch):
    run_id = store[1]
    with atlas.open(store[0]) as st:
        expected = st.sql(
            "SELECT w.example_id, w.word_idx FROM words w JOIN words h ON h.run_id = w.run_id "
            "AND h.example_id = w.example_id AND h.word_idx = w.head_word_idx JOIN attn_rows r "
            "ON r.run_id = w.run_id AND r.example_id = w.example_id AND r.src_tok = w.first_tok "
            f"WHERE w.run_id = '{run_id}' AND w.deprel = 'nsubj' AND r.layer = 2 AND r.head = 8 "
            "AND r.argmax_tok = h.first_tok ORDER BY ALL"
        ).rows()
    assert expected
    monkeypatch.setattr(examples, "PER_PAGE", 3)
    found, number = [], 1
    while True:
        asked = {"run": run_id, "deprel": "nsubj", "layer": "3", "head": "9", "page": str(number)}
        page = client.get("/examples", params=asked)
        if page.status_code == 400:
            assert said(page.text).startswith(f"page {number}: the search has")
            break
        assert f"words found {3 * number - 2} to" in page.text and f"of {len(expected)}" in page.text
        found += [(int(e), int(w)) for e, w in re.findall(rf"/example/{run_id}/(\d+)\?word=(\d+)", page.text)]
        number += 1
    assert found == expected
    assert client.get("/examples", params={"layer": "3"}).status_code == 400  # a layer without its head
    assert client.get("/examples", params={"layer": "3", "head": "99"}).status_code == 400


def test_search_by_word_and_lemma(client, store):
    page = client.get("/examples", params={"lemma": "THE", "run": store[2]}).text
    assert "<mark>the</mark>" in page.lower() and "words found 1 to" in page
    page = client.get("/examples", params={"deprel": "nsubj", "layer": "1", "head": "1", "by": "word"})
    assert page.status_code == 200
    assert client.get("/examples", params={"by": "sideways", "layer": "1", "head": "1"}).status_code == 400


def test_example_and_head_pages(client, store):
    run_id = store[2]
    with atlas.open(store[0]) as st:
        example = st.sql(f"SELECT min(example_id) FROM examples WHERE run_id = '{run_id}' AND n_words > 5").item()
    page = client.get(f"/example/{run_id[:-2]}/{example}", params={"layer": "2", "head": "5", "word": "1"})
    assert page.status_code == 200
    assert 'class="aa-head"' in page.text and 'data-layer="2" data-head="5"' in page.text
    assert page.text.count("<svg") == 1 + 6 * 12  # the head view and a thumbnail per head
    assert "in layer 2, head 5, its first piece attends most to token" in page.text
    assert client.get(f"/example/{run_id}/9999").status_code == 404
    assert client.get(f"/example/{run_id}/{example}", params={"layer": "7"}).status_code == 400
    assert client.get(f"/example/{run_id}/{example}", params={"word": "99"}).status_code == 400
    head = client.get("/head/2-5", params={"run": run_id})
    assert head.status_code == 200 and "Head 2-5" in head.text
    for name in HEAD_ENTRIES:
        assert f">{name}</a>" in head.text
    assert re.search(rf"/example/{run_id}/\d+\?layer=2&amp;head=5", head.text)
    assert client.get("/head/7-1").status_code == 404
    assert client.get("/no/such/page").status_code == 404


# --- the command ----------------------------------------------------------------------------------------------


def cli_line(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(AtlasGroup(commands={"serve": serve}), ["serve", *args])
    return result.exit_code, result.output


def test_serve_refuses_in_one_line(store, tmp_path):
    code, output = cli_line("--store", str(tmp_path / "none"))
    assert code == 1 and output.startswith("Error: ") and output.count("\n") == 1 and "no store here" in output
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        code, output = cli_line("--store", str(store[0]), "--port", str(port))
    finally:
        taken.close()
    assert code == 1 and output == f"Error: --host 127.0.0.1 --port {port}: Address already in use\n"


def test_serve_prints_its_address_and_stops_on_ctrl_c(store):
    command = [sys.executable, "-c", "from atlas.cli_serve import serve; serve()", "--store", str(store[0])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    watchdog = threading.Timer(120, process.kill)  # a server that never prints ends the readline, not the suite
    watchdog.start()
    try:
        line = process.stdout.readline()
        origin = re.fullmatch(r"serving .* at (http://127\.0\.0\.1:\d+)/ \(Ctrl-C to stop\)\n", line)
        assert origin, line or "nothing printed in 120 s"
        import httpx

        assert httpx.get(origin.group(1) + "/", timeout=30).status_code == 200
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        watchdog.cancel()
        process.kill() if process.poll() is None else None
    assert process.returncode == 0 and err.strip().splitlines()[-1] == "stopped", err


# --- in a real browser ----------------------------------------------------------------------------------------


def checked(driver, origin: str) -> None:
    """The page loaded nothing but from ``origin`` and said no error in the console."""
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [name for name in loaded if not name.startswith(origin + "/")] == []
    assert links_outside(driver.page_source) == []
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def test_in_a_browser(browser, server, store):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(server + "/entries")
    checked(browser, server)
    browser.find_element(By.LINK_TEXT, "relative position").click()
    field = browser.find_element(By.NAME, "threshold")
    field.clear()
    field.send_keys("0.4")
    field.submit()
    assert "threshold=0.4" in browser.current_url
    assert len(browser.find_elements(By.CSS_SELECTOR, ".answer table tbody tr")) > 10
    assert browser.find_element(By.CSS_SELECTOR, "img.figure").get_property("naturalWidth") > 0
    checked(browser, server)

    browser.get(server + "/examples")
    Select(browser.find_element(By.NAME, "deprel")).select_by_value("nsubj")
    before = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.CSS_SELECTOR, "form.search button").click()
    WebDriverWait(browser, 30).until(expected_conditions.staleness_of(before))  # the search's page, not the form's
    found = browser.find_elements(By.CSS_SELECTOR, ".table tbody tr")
    assert found and all(row.find_elements(By.TAG_NAME, "mark") for row in found)
    checked(browser, server)
    found[0].find_element(By.TAG_NAME, "a").click()
    view = browser.find_element(By.CSS_SELECTOR, "svg.aa-head")
    assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == ("1", "1")
    assert len(view.find_elements(By.TAG_NAME, "line")) > 0
    run_id, example = re.search(r"/example/([^/?]+)/(\d+)", browser.current_url).groups()
    with atlas.open(store[0]) as st:
        pieces = st.sql(
            f"SELECT piece FROM tokens WHERE run_id = '{run_id}' AND example_id = {example} ORDER BY tok_idx"
        )["piece"].to_list()
    shown = browser.execute_script(
        "return [...document.querySelectorAll('svg.aa-head > text')].map(t => t.lastChild.textContent)"
    )
    assert shown == pieces
    Select(browser.find_element(By.CSS_SELECTOR, "#head select[name=head]")).select_by_value("4")  # submits
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "svg.aa-head").get_attribute("data-head") == "4"
    )
    checked(browser, server)

    browser.find_element(By.PARTIAL_LINK_TEXT, "about head 1-4").click()
    assert browser.find_element(By.TAG_NAME, "h1").text == "Head 1-4"
    scores = browser.find_elements(By.XPATH, "//h2[.='Scores']/following-sibling::div[1]//tbody/tr")
    assert {row.find_element(By.TAG_NAME, "a").text for row in scores} == set(HEAD_ENTRIES)
    typical = browser.find_elements(By.XPATH, "//h2[.='Typical inputs']/following-sibling::div[1]//tbody/tr")
    assert len(typical) > 1 and "run " + store[2] in browser.find_element(By.CLASS_NAME, "runbar").text
    checked(browser, server)
