"""Drive the page of ``python -m crf_lr.serve`` in headless Chromium (Selenium) and screenshot it.

Starts the server on a free port of 127.0.0.1, opens ``/``, types a text, presses the button and
reads back the highlighted entities (or the separated words); tests/serving/test_serve_browser.py
uses the same functions. Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium``.

    python tools/serve_page.py runs/ner/model docs/figures/serve-page.png \\
        --text '中共中央总书记江泽民在北京人民大会堂发表新年讲话。'
"""
import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def browser_missing():
    """Why no headless Chromium can be driven here (a sentence), or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[serve]')"
    for program in ('chromium', 'chromedriver'):
        if not shutil.which(program):
            return f'{program} not found (apt-get install chromium chromium-driver)'
    return None


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_server(model_dir, *flags, timeout=180):
    """``python -m crf_lr.serve model_dir`` on a free loopback port; yields its base URL and its
    process id, and stops it on exit (raises RuntimeError with its output if it does not come
    up)."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        'PYTHONPATH')])))
    server = subprocess.Popen([sys.executable, '-m', 'crf_lr.serve', model_dir, '--port',
                               str(port), *flags], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    url = f'http://127.0.0.1:{port}'
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(url + '/healthz', timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    server.kill()
                    raise RuntimeError(f'the server did not start:\n{server.stdout.read()}')
                time.sleep(0.5)
        yield url, server.pid
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def chromium(width=1100, height=1500):
    """A headless Chromium WebDriver (Debian's chromium and chromedriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which('chromium')
    for flag in ('--headless=new', '--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu',
                 f'--window-size={width},{height}', '--lang=en'):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which('chromedriver')))
    try:
        yield driver
    finally:
        driver.quit()


def analyse(driver, url, text, timeout=60):
    """Open the page, analyse ``text``; returns ``(entities, words)``: ``[(mention, type,
    title)]`` of the highlighted elements and the separated words (one of them empty)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url + '/')
    wait = WebDriverWait(driver, timeout)
    wait.until(lambda d: d.find_element(By.ID, 'card').text)               # the card is in
    box = driver.find_element(By.ID, 'text')          # ChromeDriver types no astral characters
    driver.execute_script('arguments[0].value = arguments[1];', box, text)
    driver.find_element(By.ID, 'run').click()
    wait.until(lambda d: ' in ' in d.find_element(By.ID, 'status').text
               or 'error' in d.find_element(By.ID, 'status').get_attribute('class'))
    status = driver.find_element(By.ID, 'status')
    if 'error' in status.get_attribute('class'):
        raise RuntimeError(f'the page shows an error: {status.text}')
    entities = [(mark.get_attribute('textContent')[:-len(
                     mark.find_element(By.CLASS_NAME, 'label').get_attribute('textContent'))],
                 mark.get_attribute('data-type'), mark.get_attribute('title'))
                for mark in driver.find_elements(By.CSS_SELECTOR, '#output mark.entity')]
    words = [word.text for word in driver.find_elements(By.CSS_SELECTOR, '#output .word')]
    return entities, words


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model_dir')
    parser.add_argument('screenshot', help='PNG to write')
    parser.add_argument('--text', default='中共中央总书记江泽民在北京人民大会堂发表新年讲话。')
    parser.add_argument('--height', type=int, default=1500)
    args = parser.parse_args(argv)
    missing = browser_missing()
    if missing:
        parser.error(missing)
    with running_server(args.model_dir) as (url, _), chromium(height=args.height) as driver:
        entities, words = analyse(driver, url, args.text)
        driver.save_screenshot(args.screenshot)
    print(entities or words)
    print(f'wrote {args.screenshot}')


if __name__ == '__main__':
    main()
