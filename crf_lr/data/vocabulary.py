"""Does an encoder fit a text? The script of its letters picks the default encoder, and the share of
its units that the vocabulary maps to ``[UNK]`` guards training and prediction. No TensorFlow.

    >>> choose_encoder(['北京欢迎你。', '上海'])
    ('albert-tiny-zh', '100% of the letters are CJK')
    >>> check_vocabulary(UnitEncoder(vocab_path, 'chars'), texts, 'minilm-en')
    ValueError: 58.2% of the training units are unknown to minilm-en's vocabulary ([UNK]) ...
"""
import os
import re
from collections import Counter

from crf_lr.data.pieces import UnitEncoder

UNKNOWN_LIMIT = 0.10          # above this share of [UNK] units, training stops (--allow-unknown)
CHINESE, ENGLISH = 'albert-tiny-zh', 'minilm-en'
_SCANNED_UNITS = 200_000      # enough units to judge a corpus; bounds the cost on large files

CJK = re.compile('[\u2e80-\u2fdf\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af'
                 '\uf900-\ufaff\U00020000-\U0002fa1f]')
_LATIN = re.compile('[A-Za-z\u00c0-\u024f]')


def _units(sequences, limit=_SCANNED_UNITS):
    """The first ``limit`` non-blank units (characters of a str, items of a list of words)."""
    count = 0
    for units in sequences:
        for unit in units:
            if unit.strip():
                yield unit
                count += 1
                if count >= limit:
                    return


def script_shares(sequences):
    """``(cjk, latin)``: the shares of the letters of ``sequences`` that are CJK and Latin.

        >>> script_shares(['abc中'])
        (0.25, 0.75)
    """
    letters = cjk = latin = 0
    for unit in _units(sequences):
        for char in unit:
            if char.isalpha():
                letters += 1
                cjk += bool(CJK.match(char))
                latin += bool(_LATIN.match(char))
    return (cjk / letters, latin / letters) if letters else (0.0, 0.0)


def choose_encoder(sequences):
    """The packaged encoder for text whose user names none, by the script of its letters (not the
    file's layout): mostly CJK -> the Chinese ALBERT-tiny, else the English MiniLM.

    Args:
        sequences: iterable of units (a str of characters, or a list of words).
    Returns:
        ``(name, reason)``, the reason to print beside the name.

        >>> choose_encoder([['EU', 'rejects', 'German', 'call']])
        ('minilm-en', '100% of the letters are Latin')
    """
    cjk, latin = script_shares(sequences)
    if cjk > 0.5:
        return CHINESE, f'{cjk:.0%} of the letters are CJK'
    if latin > 0.5:
        return ENGLISH, f'{latin:.0%} of the letters are Latin'
    return ENGLISH, f'{cjk:.0%} of the letters are CJK and {latin:.0%} Latin'


def unknown_share(encoder, sequences):
    """``(share, examples)``: the share of the (non-blank) units of ``sequences`` that ``encoder``
    maps to ``[UNK]``, and the three most frequent such units.

    Args:
        encoder: :class:`~crf_lr.data.pieces.UnitEncoder`; sequences: iterable of units.

        >>> unknown_share(UnitEncoder(minilm_vocab, 'chars'), ['科技'])
        (1.0, ['科', '技'])
    """
    total, unknown = 0, Counter()
    for unit in _units(sequences):
        total += 1
        if encoder.unk in encoder.pieces(unit):
            unknown[unit] += 1
    share = sum(unknown.values()) / total if total else 0.0
    return share, [unit for unit, _ in unknown.most_common(3)]


LONG_CJK_WORD = 6     # CJK characters: longer "words" are text without spaces (a word is 1-4)


def unspaced_warning(encoder, lines):
    """The guard of a word model at prediction: a warning line when ``lines`` are mostly CJK text
    without spaces, each run of which the model reads as one word, else None.

        >>> unspaced_warning(tagger.encoder, ['中共中央总书记江泽民在北京会见了安南'])
        'warning: most of the input is CJK text without spaces ...'
    """
    if encoder.units != 'words' or script_shares(lines)[0] <= 0.5:
        return None
    words = [word for line in lines for word in line.split() if CJK.search(word)]
    long = [word for word in words if sum(map(bool, map(CJK.match, word))) > LONG_CJK_WORD]
    if len(long) * 2 <= len(words):
        return None
    return (f"warning: most of the input is CJK text without spaces, which a word model reads as "
            f"one word per run (e.g. {long[0][:12]!r}, {len(long)} of {len(words)} words): its "
            f"tags there mean little; space the words as its training file did, or predict with "
            f"a model trained on a character file (one character and its tag a line)")


def _packaged_vocab(name):
    """The vocab.txt of a packaged encoder, or None where its package is not installed."""
    from crf_lr.model.pretrained import packaged_source
    try:
        path = os.path.join(packaged_source(name), 'vocab.txt')
    except (FileNotFoundError, ValueError):
        return None
    return path if os.path.isfile(path) else None


def _examples(units, width=20):
    """Example units for a line, each quoted and cut to ``width`` characters (an unspaced line
    read by a word model is one unit).

        >>> _examples(['Zürich', 'x' * 30])
        "'Zürich', 'xxxxxxxxxxxxxxxxxxxx…'"
    """
    return ', '.join(repr(unit if len(unit) <= width else unit[:width] + '…') for unit in units)


def check_vocabulary(encoder, sequences, name, allow=False, limit=UNKNOWN_LIMIT):
    """The guard before training: the share of training units the encoder cannot read.

    Args:
        encoder: :class:`~crf_lr.data.pieces.UnitEncoder` of the chosen encoder's vocabulary.
        sequences: the training units (str or list of words per sentence).
        name: the encoder as the user names it (``--encoder``).
        allow: go on above ``limit`` (``--allow-unknown``): the line then says so.
        limit: the largest share of ``[UNK]`` units that trains without ``allow``.
    Returns:
        a line to print: the share of unknown units.
    Raises:
        ValueError: above ``limit`` without ``allow``, in one line naming the share, three
            example units and the packaged encoder that knows more of them.
    """
    sequences = list(sequences)
    share, examples = unknown_share(encoder, sequences)
    line = f'{share:.1%} of the training units are unknown to the vocabulary of {name} ([UNK])'
    if share <= limit:
        return line
    if allow:
        return line + ' (--allow-unknown: training anyway)'
    hint, best = 'pass --encoder with a checkpoint whose vocabulary covers this text', share
    for other in (CHINESE, ENGLISH):
        vocab = other != name and _packaged_vocab(other)
        if vocab:
            other_share, _ = unknown_share(UnitEncoder(vocab, encoder.units), sequences)
            if other_share < best:
                hint, best = f'try --encoder {other} ({other_share:.1%} unknown)', other_share
    raise ValueError(f'{line}, e.g. {_examples(examples)}: {hint}, or pass '
                     f'--allow-unknown to train anyway')


def unknown_warning(encoder, sequences, limit=UNKNOWN_LIMIT):
    """The guard at prediction: a warning line when more than ``limit`` of the units of
    ``sequences`` are ``[UNK]`` to ``encoder`` (the model cannot read them), else None.

        >>> unknown_warning(tagger.encoder, ['Hello world'])
        "warning: 100.0% of the input's units are unknown to the model's vocabulary ..."
    """
    share, examples = unknown_share(encoder, sequences)
    if share <= limit:
        return None
    return (f"warning: {share:.1%} of the input's units are unknown to the model's vocabulary "
            f"([UNK]), e.g. {_examples(examples)}: the model was trained on other text "
            f"and its predictions there mean little")
