"""train report: one self-contained HTML page of a run, written at the end of train fit."""

import json
import re
import shutil

import pytest
from browser import (
    console_errors,
    firefox_drawing,
    needs_chromium,
    needs_firefox,
    opens_its_detail,
    undecoded_images,
)

from conftest import ROOT, colour_images
from conftest import run as packer_run
from train_cli import train

CLASSES = ["c0", "c1", "c2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One epoch at a rate too low to learn: a run with mistakes to show."""
    root = tmp_path_factory.mktemp("report")
    colour_images(root / "images", [(200, 30, 30), (30, 200, 30), (30, 30, 200)],
                  per_class=40, spread=60)
    packer_run("pack", root / "images", "-o", root / "wds", "-q")
    output = train("fit", root / "wds", "--out", root / "run", "--epochs", "1", "--image-size",
                   "16", "--workers", "0", "--lr", "1e-5", "--val-split", "0.25")
    assert f"report: {root / 'run' / 'report.html'}" in output
    return root


def cards(page: str) -> list[tuple[str, str, str, float]]:
    """(key, true, predicted, probability) of each mistake shown, in page order."""
    found = re.findall(r'<span class="key">(.*?)</span>\s*<span class="wrong">(.*?) → (.*?)'
                       r'</span>\s*<span class="muted">p = ([0-9.]+)</span>', page)
    return [(key, truth, guess, float(p)) for key, truth, guess, p in found]


def test_fit_writes_the_page_with_every_section(run):
    page = (run / "run" / "report.html").read_text(encoding="utf-8")
    summary = json.loads((run / "run" / "summary.json").read_text())
    for section in ("Recipe: what was chosen, and why", "Curves", "Classes (validation",
                    "Confusion matrix", "Mistakes", "Data wait"):
        assert section in page
    for name, choice in summary["chosen"].items():
        assert f"--{name.replace('_', '-')}" in page and choice["why"] in page
    assert page.count('id="class-bar-') == 3 and "learning rate" in page
    assert re.findall(r'src="(?!data:)', page) == [] and "<link" not in page  # all inlined


def test_mistakes_are_the_wrong_ones_most_confident_first(run):
    page = (run / "run" / "report.html").read_text(encoding="utf-8")
    matrix = json.loads((run / "run" / "summary.json").read_text())["best"]["val"]["confusion"]
    wrong = sum(n for i, row in enumerate(matrix) for j, n in enumerate(row) if i != j)
    shown = cards(page)
    assert wrong > 0 and len(shown) == min(wrong, 48)
    assert all(truth != guess and truth in CLASSES and guess in CLASSES
               for _, truth, guess, _ in shown)
    assert [p for *_, p in shown] == sorted((p for *_, p in shown), reverse=True)
    assert all(key.split("/")[0] == truth for key, truth, _, _ in shown)  # keys are c0/12
    assert page.count('<img class="thumb" src="data:image/png;base64,') == len(shown)


def test_report_command_bounds_the_mistakes_and_writes_where_told(run, tmp_path):
    output = train("report", run / "run", "-o", tmp_path / "page.html", "--mistakes", "2",
                   "--workers", "0")
    assert f"report written to {tmp_path / 'page.html'}" in output
    assert len(cards((tmp_path / "page.html").read_text(encoding="utf-8"))) == 2


def test_a_class_without_validation_samples_says_so(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run / "run", copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["best"]["val"]["confusion"][0] = [0, 0, 0]
    (copy / "summary.json").write_text(json.dumps(summary))
    train("report", copy, "--workers", "0")
    page = (copy / "report.html").read_text(encoding="utf-8")
    assert re.search(r"<td>c0</td>\s*<td class=\"num muted\" colspan=\"3\">no samples</td>",
                     page)


def test_a_regression_run_shows_its_largest_errors(tmp_path):
    rows = "a,b,y\n" + "".join(f"{i % 7},{i % 5},{i * 0.5}\n" for i in range(80))
    (tmp_path / "r.csv").write_text(rows)
    packer_run("pack", tmp_path / "r.csv", "--label-column", "y", "--task", "regress",
               "--to", "hdf5", "-o", tmp_path / "r.h5", "-q")
    train("fit", tmp_path / "r.h5", "--out", tmp_path / "run", "--epochs", "2", "--workers",
          "0", "--lr", "1e-3")
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert "furthest from their targets" in page and "validation mae" in page
    errors = [float(e) for e in re.findall(r'<span class="muted">error ([0-9.e+-]+)</span>',
                                           page)]
    assert errors and errors == sorted(errors, reverse=True)


def test_a_folder_that_is_not_a_finished_run_is_one_message(run, tmp_path):
    output = train("report", tmp_path, expect=1)
    assert "not a finished run of train fit (summary.json is missing" in output
    copy = tmp_path / "run"
    shutil.copytree(run / "run", copy)
    (copy / "metrics.jsonl").write_text('{"epoch": 1,\n')
    output = train("report", copy, expect=1)
    assert f"{copy / 'metrics.jsonl'}, line 1: not valid JSON" in output
    assert "Traceback" not in output


@needs_firefox
def test_report_in_firefox(run, tmp_path):
    drawn = firefox_drawing(run / "run" / "report.html", tmp_path / "firefox.png")
    rows = drawn.std(axis=1) > 10
    assert drawn.shape == (1600, 1280) and rows.mean() > 0.3


@needs_chromium
def test_report_in_chromium(browser, run):
    from selenium.webdriver.common.by import By

    browser.get((run / "run" / "report.html").as_uri())
    assert undecoded_images(browser) == []
    thumbnails = browser.find_elements(By.CSS_SELECTOR, "img.thumb")
    assert thumbnails and len(thumbnails) == len(browser.find_elements(By.CSS_SELECTOR,
                                                                        "button.card"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#class-chart g[id^='class-bar-']")) == 3
    browser.save_screenshot(str(run / "report.png"))  # the test's artefact
    assert (run / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert opens_its_detail(browser, browser.find_elements(By.CSS_SELECTOR, "button.card")[0])
    assert console_errors(browser) == []
    assert (ROOT / "docs" / "report.png").is_file()  # the picture the docs show
