"""The page of ``python -m crf_lr.serve`` in a real browser: headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by Selenium) against a real server on 127.0.0.1.

Oracles: the entities the trained tiny model finds through ``predict_lines`` (张三 PER, 北京
LOC) appear highlighted with their types and colours, the same characters after emoji (astral code
points: two UTF-16 units each), with the confidences and the path probability of
``predict_records``; each type chip lies beside its entity's last character at every width; a
segmentation model's words concatenate back to the typed text. Skips, saying why, where no browser
can be had (``.ci/run`` installs one).
"""
import importlib.util
import os

import pytest
from helpers.paths import REPO

ROOT = str(REPO)
spec = importlib.util.spec_from_file_location('serve_page', os.path.join(ROOT, 'tools',
                                                                         'serve_page.py'))
serve_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_page)

pytest.importorskip('starlette', reason="the server needs pip install '.[serve]'")
missing = serve_page.browser_missing()
pytestmark = pytest.mark.skipif(bool(missing), reason=f'no headless browser: {missing}')


@pytest.fixture(scope='module')
def browser():
    try:
        with serve_page.chromium(height=900) as driver:
            yield driver
    except Exception as error:          # e.g. Chromium present but unable to start here
        if 'driver' not in locals():
            pytest.skip(f'headless Chromium does not start: {str(error).splitlines()[0]}')
        raise


def test_entities_are_highlighted_with_their_types(trained_ner_dir, browser, tmp_path):
    from crf_lr.serving.predict import predict_lines
    from crf_lr.serving.tagger import Tagger
    from selenium.webdriver.common.by import By
    text = '张三去北京工作。'
    tagger = Tagger.load(trained_ner_dir)
    expected = predict_lines(tagger, [text])[0]
    allowed = tagger.head.scheme.allowed(tagger.head.labels)[0]
    assert [(e['text'], e['type']) for e in expected] == [('张三', 'PER'), ('北京', 'LOC')]
    with serve_page.running_server(trained_ner_dir) as (url, _):
        entities, words = serve_page.analyse(browser, url, text)
        browser.save_screenshot(str(tmp_path / 'serve-page.png'))
        assert [(mention, kind) for mention, kind, _ in entities] == [('张三', 'PER'),
                                                                      ('北京', 'LOC')]
        assert all(title.startswith(kind) for _, kind, title in entities) and words == []
        output = browser.execute_script(
            "const o = document.getElementById('output').cloneNode(true);"
            "o.querySelectorAll('.label').forEach((l) => l.remove()); return o.textContent;")
        assert output == text
        legend = {chip.text: chip.value_of_css_property('background-color')
                  for chip in browser.find_elements(By.CSS_SELECTOR, '#legend .chip')}
        marks = {mark.get_attribute('data-type'): mark.value_of_css_property('background-color')
                 for mark in browser.find_elements(By.CSS_SELECTOR, '#output mark.entity')}
        assert set(legend) == {'LOC', 'PER'} and legend['LOC'] != legend['PER']
        assert marks == legend                                # one colour per type, as listed
        impossible = browser.find_elements(By.CSS_SELECTOR, '#transitions td.impossible')
        assert len(impossible) == (~allowed).sum() > 0                      # O -> I-LOC, ...
        assert all(cell.text == '×' for cell in impossible)
    assert (tmp_path / 'serve-page.png').stat().st_size > 10_000


# For each highlight: is its chip on the line of the entity's last character, and after it?
CHIP_BESIDE_ENTITY = """
return [...document.querySelectorAll('#output mark.entity')].map((mark) => {
  const label = mark.querySelector('.label');
  const walker = document.createTreeWalker(mark, NodeFilter.SHOW_TEXT);
  let last = null;
  while (walker.nextNode()) {
    if (!label.contains(walker.currentNode) && walker.currentNode.length) last = walker.currentNode;
  }
  const range = document.createRange();
  range.setStart(last, last.length - 1);
  range.setEnd(last, last.length);
  const c = range.getBoundingClientRect(), l = label.getBoundingClientRect();
  return Math.abs((c.top + c.bottom) / 2 - (l.top + l.bottom) / 2) < c.height / 2 &&
    l.left >= c.right - 2;
});
"""


def test_entities_after_emoji_with_confidences_and_path_probability(trained_ner_dir, browser,
                                                                    tmp_path):
    from crf_lr.model.precision import set_precision
    from crf_lr.serving.predict import predict_records
    from crf_lr.serving.tagger import Tagger
    from selenium.webdriver.common.by import By
    text = '😀😀李鹏在北京会见了美国国务卿奥尔布赖特。'
    set_precision('auto')                    # as the server computes by default
    (record,) = predict_records(Tagger.load(trained_ner_dir), [text])
    expected = [(e['text'], e['type']) for e in record['entities']]
    assert ('北京', 'LOC') in expected
    with serve_page.running_server(trained_ner_dir) as (url, _):
        entities, _ = serve_page.analyse(browser, url, text)
        browser.save_screenshot(str(tmp_path / 'emoji.png'))
        assert [(mention, kind) for mention, kind, _ in entities] == expected
        labels = [label.text for label in browser.find_elements(By.CSS_SELECTOR,
                                                                '#output mark.entity .label')]
        assert labels == [f'{e["type"]} {e["confidence"]:.2f}' for e in record['entities']]
        path = browser.find_element(By.ID, 'path').text
        assert path.startswith('path probability ')
        assert float(path.split()[-1]) == pytest.approx(record['path_probability'], rel=5e-3)
        for width in range(4, 16):                     # lines wrap at every place in turn
            browser.execute_script(f"document.getElementById('output').style.width = "
                                   f"'{width}em';")
            assert all(browser.execute_script(CHIP_BESIDE_ENTITY)), width
    assert (tmp_path / 'emoji.png').stat().st_size > 10_000


def test_a_segmentation_model_shows_words(tmp_path, browser):
    from crf_lr.compat import keras
    from helpers.tiny_models import save_random_tagger
    keras.utils.set_random_seed(4)
    model_dir = save_random_tagger(str(tmp_path), 'crf', (), 'SEG', 16)
    text = '我们喜欢北京的天气。'
    with serve_page.running_server(model_dir) as (url, _):
        entities, words = serve_page.analyse(browser, url, text)
    assert entities == [] and len(words) > 1 and ''.join(words) == text
