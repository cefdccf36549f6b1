"""predict --format html and compare --html in a real headless browser (Debian's chromium driven
by selenium through chromium-driver, both installed by scripts/setup.sh): the page loads with no
console message, references nothing outside itself, and shows the numbers of the JSON it was
made from. The prediction page's screenshot goes to out/report/predict-report.png (the README's
docs/images/predict-report.png is a copy)."""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from commlens import plan as planlib
from integration_helpers import export_pt2, save_plan

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT2 = "examples.gpt2:gpt2"
PLAN = "examples.plans:gpt2_tp_sp(tp=4)"


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are not installed (scripts/setup.sh installs them)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1500"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=options)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    return export_pt2(GPT2, d), save_plan(planlib.resolve_plan(PLAN), d), d


def _open(browser, path):
    browser.get(path.resolve().as_uri())
    assert browser.get_log("browser") == []  # no console error, warning or message
    return json.loads(browser.execute_script("return document.getElementById('commlens-data').textContent"))


def _self_contained(html):
    # nothing fetched: no src/href attribute, no url(), no @import
    assert not re.search(r"\b(src|href)\s*=|url\(|@import", html)


def _walk(node):
    yield node
    for c in node["children"]:
        yield from _walk(c)


def test_prediction_page(run_commlens, browser, gpt2, tmp_path):
    pt2, plan, _ = gpt2
    page, pred = tmp_path / "report.html", tmp_path / "pred.json"
    common = ("predict", pt2, "--plan", plan, "--phase", "both", "--cluster", "h100-ib-ndr")
    assert run_commlens(*common, "--format", "html", "-o", page).returncode == 0
    assert run_commlens(*common, "--format", "json", "-o", pred).returncode == 0
    _self_contained(page.read_text())
    data = _open(browser, page)
    doc = json.loads(pred.read_text())
    assert data == doc  # the page carries the JSON predict writes
    assert browser.title == f"commlens: {pt2} under {plan}"

    css = browser.find_element
    step = doc["commlens"]["step"]
    row = css("css selector", "#totals tr[data-phase='step']")
    cells = row.find_elements("css selector", "td")
    assert int(cells[1].get_attribute("data-collectives")) == step["forward"]["collectives"] + \
        step["backward"]["collectives"]
    assert int(cells[2].get_attribute("data-bytes")) == step["forward"]["bytes_per_rank"] + \
        step["backward"]["bytes_per_rank"]
    assert float(cells[3].get_attribute("data-time-us")) == pytest.approx(step["time_us"])
    us = step["time_us"]
    assert cells[3].text == (f"{us / 1e3:.3f} ms" if us >= 1e3 else f"{us:.1f} us")
    # every module of the JSON tree, with its forward and backward totals, in tree order
    rows = browser.find_elements("css selector", "#modules tr[data-fqn]")
    tree = list(_walk(doc))
    assert [r.get_attribute("data-fqn") for r in rows] == [n["fqn"] for n in tree]
    for r, n in zip(rows, tree):
        assert int(r.get_attribute("data-forward")) == sum(c for _, c in n["collectives_forward"])
        assert int(r.get_attribute("data-backward")) == sum(c for _, c in n["collectives_backward"])
    # one table row per collective record, one chart bar pair per collective kind
    records = [c for n in tree for p in ("forward", "backward") for c in n.get(f"collectives_{p}_detail", [])]
    assert len(browser.find_elements("css selector", "#collectives tr")) == len(records) + 1
    kinds = {c["op"] for c in records}
    labels = [t.text for t in browser.find_elements("css selector", "#chart-collectives text[text-anchor='end']")]
    assert labels == sorted(kinds)
    totals = [float(t.get_attribute("data-value"))
              for t in browser.find_elements("css selector", "#chart-collectives text[data-value]")]
    assert sum(totals) == pytest.approx(step["time_us"])
    shot = ROOT / "out" / "report" / "predict-report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot))


def test_compare_page_colours_cells(run_commlens, browser, gpt2, tmp_path):
    pt2, plan, _ = gpt2
    pred = tmp_path / "pred.json"
    assert run_commlens("predict", pt2, "--plan", plan, "--phase", "both", "--format", "json", "-o",
                        pred).returncode == 0
    r = subprocess.run([sys.executable, "-m", "commlens.measure", GPT2, "--plan", str(plan), "-o",
                        str(tmp_path / "m.json")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    measured = tmp_path / "m.counts.json"
    # one cell off by one: Global's forward all_gather count
    doc = json.loads(pred.read_text())
    key = "c10d_functional.all_gather_into_tensor"
    doc["collectives_forward"] = [[k, n + 1 if k == key else n] for k, n in doc["collectives_forward"]]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc))
    page = tmp_path / "compare.html"
    r = run_commlens("compare", wrong, measured, "--html", "-o", page)
    assert r.returncode == 1  # a difference, as without --html
    _self_contained(page.read_text())
    data = _open(browser, page)
    text = run_commlens("compare", wrong, measured)
    assert browser.find_element("css selector", "#summary").text == text.stdout.splitlines()[-1]
    assert data["summary"]["differ"] == 1
    rows = browser.find_elements("css selector", "#cells tr[data-module]")
    assert len(rows) == data["summary"]["cells"]
    differ = [r for r in rows if r.get_attribute("class") == "differ"]
    assert [(r.get_attribute("data-module"), r.get_attribute("data-collective"), r.get_attribute("data-phase"))
            for r in differ] == [("Global", key, "forward")]
    assert int(differ[0].get_attribute("data-predicted")) == int(differ[0].get_attribute("data-measured")) + 1
    colour = lambda r: r.find_element("css selector", "td").value_of_css_property("background-color")
    assert colour(differ[0]) == "rgba(253, 232, 232, 1)"
    assert {colour(r) for r in rows if r.get_attribute("class") == "match"} == {"rgba(234, 247, 238, 1)"}


def test_html_options(run_commlens, gpt2, tmp_path):
    pt2, plan, _ = gpt2
    r = run_commlens("predict", pt2, "--plan", plan, "--format", "svg")
    assert (r.returncode, r.stderr) == (2, "commlens: error: --format must be table, json or html, got 'svg'\n")
    r = run_commlens("compare", "a.json", "b.json", "--json", "--html")
    assert (r.returncode, r.stderr) == (2, "commlens: error: --json and --html exclude each other\n")
