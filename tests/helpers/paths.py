"""The repository's folders, for tests that read its files or run its scripts.

    from helpers.paths import REPO
    script = REPO / 'examples' / 'plain_ner.py'
"""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / 'fixtures'
SAMPLES = REPO / 'data'          # the small sample of each format (data/README.md)
