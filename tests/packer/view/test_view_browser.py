"""The `packer view` page in a real browser: Debian's chromium, headless, driven by
Selenium through chromium-driver, loading the page from disk."""

from browser import console_errors, needs_chromium, opens_its_detail, undecoded_images
from view_pages import planted_folder

from conftest import run

pytestmark = needs_chromium


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
