"""The attention page in a real headless browser: loads offline without errors, heads switch, hover
highlights.

Needs selenium (dev extra) and Debian's chromium + chromium-driver (`make install` adds them where
it can run apt as root); skips, saying which is missing, where no browser starts.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from translator.diagnostics.html import sentence_data, write_page

H = 3
SRC, OUT, IN = ["▁A", "▁dog", "</s>"], ["▁Ein", "▁Hund", "</s>"], ["<s>", "▁Ein", "▁Hund"]


def _maps() -> dict[str, list[torch.Tensor]]:
    torch.manual_seed(0)
    rand = lambda t, s: torch.softmax(torch.randn(H, t, s) * 3, dim=-1)  # noqa: E731
    return {
        "encoder": [rand(3, 3), rand(3, 3)],
        "decoder": [rand(3, 3).tril() for _ in range(2)],
        "cross": [rand(3, 3), rand(3, 3)],
    }


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "attention.html"
    labels = {"src": SRC, "in": IN, "out": OUT}
    write_page(
        path,
        "attention: <test> & co",
        [sentence_data(labels, _maps()), sentence_data(labels, _maps())],
        ("en", "de"),
    )
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (the dev extra has it)"
    )
    from selenium.common.exceptions import WebDriverException

    binary, driver_path = (
        shutil.which("chromium") or shutil.which("chromium-browser"),
        shutil.which("chromedriver"),
    )
    if not binary or not driver_path:
        pytest.skip(
            "no chromium / chromedriver on PATH (Debian: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    # its profile among the test's temporary files, not a directory left in $TMPDIR per run
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=webdriver.ChromeService(driver_path), options=options)
    except WebDriverException as err:
        pytest.skip(f"chromium did not start: {(err.msg or str(err)).splitlines()[0]}")
    yield driver
    driver.quit()


def test_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # nothing to fetch, no CDN
    assert "<script src" not in text and "<link" not in text and "@import" not in text
    assert "default-src 'none'" in text  # and the browser is told to fetch nothing
    # a token cannot end the script
    assert "</s>" not in text.split('id="data"')[1].split("</script>")[0]


def _select(driver, element_id: str, value: str) -> None:
    from selenium.webdriver.support.select import Select

    Select(driver.find_element("id", element_id)).select_by_value(value)


def _colours(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#panels .cell')].map(c => c.style.background)"
    )


# the cells a self-attention map highlights for token 1: its row and its column
ROW_AND_COLUMN_1 = {("1", "0"), ("1", "1"), ("1", "2"), ("0", "1"), ("2", "1")}


def _lit(cells) -> set[tuple[str, str]]:
    return {(c.get_attribute("data-row"), c.get_attribute("data-col")) for c in cells}


def test_page_loads_without_console_errors(browser, page):
    browser.get(page.as_uri())
    assert browser.title == "attention: <test> & co"
    # all heads: the mean, then each
    assert len(browser.find_elements("css selector", "#panels .panel")) == H + 1
    assert len(browser.find_elements("css selector", "#panels .cell")) == (H + 1) * 9
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors


def test_switching_head_layer_and_kind_changes_the_drawing(browser, page):
    browser.get(page.as_uri())
    _select(browser, "head", "0")
    head0 = _colours(browser)
    _select(browser, "head", "1")
    head1 = _colours(browser)
    assert len(head0) == len(head1) == 9 and head0 != head1
    _select(browser, "layer", "1")
    assert _colours(browser) != head1
    _select(browser, "kind", "decoder")
    labels = [e.text for e in browser.find_elements("css selector", "#panels .collab")]
    assert labels == IN  # decoder keys are the decoder's inputs
    assert not browser.get_log("browser")


def test_hovering_a_token_highlights_its_row_and_column(browser, page):
    from selenium.webdriver.common.action_chains import ActionChains

    browser.get(page.as_uri())
    _select(browser, "kind", "encoder")  # self-attention: row i and column i are one token
    ActionChains(browser).move_to_element(
        browser.find_elements("css selector", ".rowlab")[1]
    ).perform()
    lit = browser.find_elements("css selector", "#panels .cell.hl")
    assert _lit(lit) == ROW_AND_COLUMN_1
    assert len(lit) == 5 * (H + 1)  # in every panel
    # rows are target tokens, columns source tokens: only the column
    _select(browser, "kind", "cross")
    ActionChains(browser).move_to_element(
        browser.find_elements("css selector", ".collab")[2]
    ).perform()
    lit = browser.find_elements("css selector", "#panels .cell.hl")
    assert {c.get_attribute("data-col") for c in lit} == {"2"} and len(lit) == 3 * (H + 1)
    assert [e.text for e in browser.find_elements("css selector", ".collab.hl")] == ["</s>"] * (
        H + 1
    )


def test_each_map_is_a_table_a_screen_reader_can_read(browser, page):
    """Token headers in their languages (the word-start mark not read out), and each cell's
    weight as its text, the number its tooltip shows; the colours kept in high-contrast modes."""
    browser.get(page.as_uri())
    _select(browser, "kind", "cross")
    _select(browser, "head", "0")
    table = browser.find_element("css selector", "#panels table")
    cols = table.find_elements("css selector", "thead th[scope=col]")
    rows = table.find_elements("css selector", "tbody th[scope=row]")
    assert [c.text for c in cols] == SRC and [r.text for r in rows] == OUT
    assert {c.get_attribute("lang") for c in cols} == {"en"}
    assert {r.get_attribute("lang") for r in rows} == {"de"}
    hidden = table.find_elements("css selector", "th [aria-hidden=true]")
    assert [h.get_attribute("textContent") for h in hidden] == ["\u2581"] * 4  # ▁A ▁dog ▁Ein ▁Hund
    for cell in table.find_elements("css selector", "td.cell"):
        text = cell.get_attribute("textContent")
        assert float(text) == float(cell.get_attribute("title").rsplit(": ", 1)[1])
    status = browser.find_element("id", "status")
    assert status.get_attribute("aria-live") == "polite"
    assert status.text.startswith("cross-attention, layer 0, head 0: colours from 0")
    assert "forced-color-adjust: none" in page.read_text(encoding="utf-8")


def test_the_keyboard_moves_through_a_map_and_highlights_as_hovering_does(browser, page):
    from selenium.webdriver.common.keys import Keys

    browser.get(page.as_uri())
    _select(browser, "kind", "encoder")
    _select(browser, "head", "1")
    cells = browser.find_elements("css selector", "#panels td.cell")
    assert [c.get_attribute("tabindex") for c in cells] == ["0"] + ["-1"] * 8  # one Tab stop
    cells[0].send_keys(Keys.ARROW_RIGHT)
    cells[1].send_keys(Keys.ARROW_DOWN)
    active = browser.switch_to.active_element
    assert (active.get_attribute("data-row"), active.get_attribute("data-col")) == ("1", "1")
    lit = browser.find_elements("css selector", "#panels .cell.hl")
    assert _lit(lit) == ROW_AND_COLUMN_1
    weight = active.get_attribute("textContent")
    assert (
        browser.find_element("id", "readout").text
        == f"head 1: \u2581dog \u2192 \u2581dog: {weight}"
    )
    active.send_keys(Keys.ARROW_UP, Keys.ARROW_UP)  # past the edge: stays on the first row
    active = browser.switch_to.active_element
    assert (active.get_attribute("data-row"), active.get_attribute("data-col")) == ("0", "1")


def test_right_to_left_and_chinese_labels_read_as_their_scripts_are_written(browser, tmp_path):
    """An Arabic source token keeps its word-start mark at its start (its right); a Chinese
    target token turns sideways with the Latin ones, not upside down; the sentence list shows
    the text as SentencePiece joins it."""
    path = tmp_path / "scripts.html"
    src = ["\u2581\u0643\u062a\u0627\u0628", "\u2581\u062c\u062f\u064a\u062f", "</s>"]
    out = ["\u2581\u4e1c\u4eac", "\u5de5\u4f5c", "</s>"]
    labels = {"src": src, "in": ["<s>", *out[:2]], "out": out}
    write_page(path, "scripts", [sentence_data(labels, _maps())], ("ar", "zh"))
    browser.get(path.as_uri())
    _select(browser, "kind", "cross")
    option = browser.find_element("css selector", "#sentence option").text
    assert option == "0: \u0643\u062a\u0627\u0628 \u062c\u062f\u064a\u062f"
    _select(browser, "kind", "encoder")
    mark_left, text_right = browser.execute_script(
        """const th = document.querySelector('#panels tbody th[scope=row]');
        const mark = th.querySelector('[aria-hidden=true]');
        const range = document.createRange(); range.selectNode(mark.nextSibling);
        return [mark.getBoundingClientRect().left, range.getBoundingClientRect().right];"""
    )
    assert mark_left >= text_right - 0.5  # the mark on the word's right: where it starts
    _select(browser, "kind", "decoder")
    orientation = browser.execute_script(
        "return getComputedStyle(document.querySelector('#panels th.collab')).textOrientation"
    )
    assert orientation == "sideways"
