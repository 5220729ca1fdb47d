"""The `packer view` page in real browsers: Debian's chromium, headless, driven by
Selenium through chromium-driver, loading the page from disk; and Firefox drawing it."""

from browser import (
    console_errors,
    firefox_drawing,
    needs_chromium,
    needs_firefox,
    opens_its_detail,
    undecoded_images,
)
from view_pages import planted_folder

from conftest import run


@needs_firefox
def test_page_in_firefox(tmp_path):
    source = planted_folder(tmp_path / "images")
    run("pack", source, "-o", tmp_path / "wds", "-q", "--split", "train=0.5,val=0.5")
    page = tmp_path / "view.html"
    run("view", tmp_path / "wds", "-o", page, "-q")
    drawn = firefox_drawing(page, tmp_path / "firefox.png")
    assert drawn.shape == (1600, 1280)
    rows = drawn.std(axis=1) > 10  # rows with text, charts or thumbnails on them
    assert rows.mean() > 0.3 and rows[-400:].any()  # drawn down the page, not blank


@needs_chromium
def test_page_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    source = planted_folder(tmp_path / "images")
    run("pack", source, "-o", tmp_path / "wds", "-q")
    page = tmp_path / "view.html"
    run("view", tmp_path / "wds", "-o", page, "-q")
    browser.get(page.as_uri())
    assert len(browser.find_elements(By.CSS_SELECTOR, "img.thumb")) == 3 * 8
    assert undecoded_images(browser) == []
    bars = browser.find_elements(By.CSS_SELECTOR, "#class-chart g[id^='class-bar-']")
    assert len(bars) == 3
    browser.save_screenshot(str(tmp_path / "view.png"))  # the test's artefact
    assert (tmp_path / "view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert opens_its_detail(browser, browser.find_elements(By.CSS_SELECTOR, "button.card")[-1])
    assert console_errors(browser) == []
