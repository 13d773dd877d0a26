"""The long tail of users' corpus files: bytes that are not text, Label Studio's other export
layouts, and dev or test files that cannot score a run."""
import gzip

import pytest

from crf_lr.data.files import DataFormatError
from crf_lr.data.formats import read_corpus


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode('utf-8') if isinstance(content, str) else content)
    return str(path)


# ----------------------------------------------------------------------------------------------
# Bytes that are not text

def test_a_nul_character_is_an_error_naming_its_line(tmp_path):
    """A NUL was read into the tag of its line: 'I-PER\\x00' became a type of its own."""
    path = write(tmp_path, 'nul.txt', '张 B-PER\n三 I-PER\x00\n在 O\n')
    with pytest.raises(DataFormatError, match=f'^{path}:2: a NUL character .*: remove it$'):
        read_corpus(path)


@pytest.mark.parametrize('content, kind', [
    (gzip.compress('张 B-PER\n三 I-PER\n'.encode()), 'a gzip file'),
    (b'PK\x03\x04\x14\x00\x00\x00\x08\x00', 'a zip archive'),
], ids=['gzip', 'zip'])
def test_a_compressed_file_is_named_as_such(tmp_path, content, kind):
    path = write(tmp_path, 'train.txt.gz', content)
    with pytest.raises(DataFormatError, match=f'^{path}: {kind} .*not text: unpack it'):
        read_corpus(path)
