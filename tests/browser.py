"""Real browsers for the HTML pages' tests: Debian's chromium, headless, driven by
Selenium through chromium-driver, and the checks that every page passes in it; and
Debian's Firefox (ESR), headless, which draws a page through its own --screenshot (no
driver: geckodriver is no Debian package). `.ci/run` installs all three."""

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
needs_chromium = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
           "chromium-driver); .ci/run installs them")


FIREFOX = shutil.which("firefox") or "/usr/bin/firefox"
needs_firefox = pytest.mark.skipif(
    not Path(FIREFOX).exists(),
    reason="needs Debian's firefox-esr (apt-get install firefox-esr); .ci/run installs it")


def firefox_drawing(page: Path, out: Path) -> np.ndarray:
    """The page as headless Firefox draws it (1280 px wide), as grey levels; Firefox's
    profile and cache go in `out`'s folder."""
    subprocess.run([FIREFOX, "--headless", "--window-size=1280,1600", "--screenshot",
                    str(out), page.as_uri()], env={**os.environ, "HOME": str(out.parent)},
                   capture_output=True, timeout=180, check=True)
    return np.asarray(Image.open(out).convert("L"))


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def undecoded_images(driver) -> list[str]:
    """The alt text of every <img> on the page that did not decode."""
    from selenium.webdriver.common.by import By

    return [img.get_attribute("alt") for img in driver.find_elements(By.CSS_SELECTOR, "img")
            if not driver.execute_script("return arguments[0].complete && "
                                         "arguments[0].naturalWidth > 0", img)]


def opens_its_detail(driver, card) -> bool:
    """Clicking `card` shows the dialog it names, with its image decoded, and Close
    hides it again."""
    from selenium.webdriver.common.by import By

    detail = driver.find_element(By.ID, card.get_attribute("data-detail"))
    assert not detail.is_displayed()
    driver.execute_script("arguments[0].scrollIntoView()", card)
    card.click()
    opened = detail.is_displayed() and detail.get_attribute("open") is not None
    images = detail.find_elements(By.CSS_SELECTOR, "img.full")
    decoded = all(img.get_property("naturalWidth") > 0 for img in images)
    detail.find_element(By.CSS_SELECTOR, "button.close").click()
    return opened and decoded and not detail.is_displayed()


def console_errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
