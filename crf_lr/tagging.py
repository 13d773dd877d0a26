"""Tagging schemes: spans <-> tags, allowed transitions, offsets -> tags, WordPiece alignment, windows.

Spans are ``(start, end, label)`` tuples with ``end`` EXCLUSIVE, in character or token indices as each
function says. Tag schemes (the ``scheme`` argument, case-insensitive):

- ``'BIO'`` (alias ``'IOB2'``): ``B-X`` begins an entity, ``I-X`` continues it, ``O`` is outside.
- ``'IOB1'``: an entity begins with ``I-X``; ``B-X`` only starts an entity that directly follows one of
  the same type (CoNLL-2003).
- ``'BIOES'`` (alias ``'IOBES'``): ``B-X I-X* E-X`` for multi-token entities, ``S-X`` for single tokens.
- ``'BMES'``: BIOES spelt with ``M-X`` instead of ``I-X`` (the People's Daily / MSRA files).
- ``'SEG'``: word segmentation, one of ``'s' 'b' 'm' 'e'`` per character (single, begin, middle, end).

Pure Python; no TensorFlow. bert4keras's ``Tokenizer`` is only used through an object passed in.

    >>> spans_to_tags([(0, 2, 'LOC')], 3)
    ['B-LOC', 'I-LOC', 'O']
"""
import bisect
import operator

SEG = 'SEG'
_ALIASES = {'BIO': 'BIO', 'IOB2': 'BIO', 'IOB1': 'IOB1', 'BIOES': 'BIOES', 'IOBES': 'BIOES',
            'BMES': 'BMES', 'SEG': SEG}
# Prefixes of each flat scheme, in label order; BMES's 'M' plays BIOES's 'I'.
_PREFIXES = {'BIO': 'BI', 'IOB1': 'BI', 'BIOES': 'BIES', 'BMES': 'BMES'}
_SEG_AS_BIOES = {'s': 'S', 'b': 'B', 'm': 'I', 'e': 'E'}
_BIOES_AS_SEG = {v: k for k, v in _SEG_AS_BIOES.items()}


def _scheme(scheme):
    """Canonical scheme name, or a ValueError listing the known ones."""
    name = _ALIASES.get(str(scheme).upper())
    if name is None:
        raise ValueError(f'unknown tag scheme {scheme!r}: expected one of {sorted(_ALIASES)}')
    return name


def _parse(tag, scheme, position):
    """``(prefix, type)`` of ``tag`` with BMES's ``M`` read as ``I``; ``('O', None)`` for ``'O'``."""
    if scheme == SEG:
        if tag in _SEG_AS_BIOES:
            return _SEG_AS_BIOES[tag], None
        raise ValueError(f"unknown tag {tag!r} at position {position} for scheme SEG: "
                         "expected one of 's', 'b', 'm', 'e'")
    if tag == 'O':
        return 'O', None
    prefixes = _PREFIXES[scheme]
    if (isinstance(tag, str) and len(tag) > 2 and tag[0] in prefixes and tag[1] == '-'):
        return ('I' if tag[0] == 'M' else tag[0]), tag[2:]
    raise ValueError(f"unknown tag {tag!r} at position {position} for scheme {scheme}: expected 'O' "
                     f"or one of {', '.join(p + '-' for p in prefixes)} followed by a type")


def _parse_all(tags, scheme):
    return [_parse(tag, scheme, i) for i, tag in enumerate(tags)]


def tag_types(tags, scheme='BIO'):
    """The entity type of each tag, None for ``'O'``, whatever its prefix.

    Args:
        tags: list of str tags of one sequence.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
    Returns:
        list of str or None, same length.
    Raises:
        ValueError with the position of an unknown tag.

        >>> tag_types(['B-LOC', 'O', 'I-PER'])
        ['LOC', None, 'PER']
    """
    return [kind for _, kind in _parse_all(tags, _scheme(scheme))]


def _format(prefix, kind, scheme):
    if scheme == SEG:
        return _BIOES_AS_SEG[prefix]
    if prefix == 'O':
        return 'O'
    return f"{'M' if scheme == 'BMES' and prefix == 'I' else prefix}-{kind}"


def _check_spans(spans, length, flat, where=''):
    """Sorted list of ``(start, end, label)`` tuples, or a ValueError saying which span is wrong.

    ``length`` bounds the spans; ``flat`` rejects nested or overlapping spans; ``where`` prefixes
    messages (e.g. ``'data.json:12: '``).
    """
    checked = []
    for span in spans:
        if len(span) != 3:
            raise ValueError(f'{where}expected spans (start, end, label), got {span!r}')
        start, end, label = span
        try:
            start, end = operator.index(start), operator.index(end)
        except TypeError:
            raise ValueError(f'{where}span {span!r}: start and end must be integers') from None
        if not 0 <= start < end <= length:
            raise ValueError(f'{where}span {span!r} is outside the text or empty: expected '
                             f'0 <= start < end <= {length} (end exclusive)')
        if not isinstance(label, str) or not label:
            raise ValueError(f'{where}span {span!r}: the label must be a non-empty string')
        checked.append((start, end, label))
    checked.sort()
    if flat:
        for previous, span in zip(checked, checked[1:]):
            if span[0] < previous[1]:
                raise ValueError(f'{where}spans {previous!r} and {span!r} overlap (nested entities): '
                                 'flat tag schemes cannot represent them; use span labels '
                                 '(GlobalPointer) for nested entities')
    return checked


def validate_spans(text, spans, source='<input>', mentions=None, flat=False):
    """Check spans against their text and return them sorted as tuples.

    Args:
        text: str, the text the character offsets refer to.
        spans: iterable of ``(start, end, label)``, end exclusive.
        source: str naming where the spans come from, e.g. ``'train.json:12'``; starts every message.
        mentions: optional list of str parallel to ``spans``: the mention text each span must cover.
        flat: if True, overlapping (nested) spans are an error too.
    Returns:
        list of ``(start, end, label)`` tuples sorted by start.
    Raises:
        ValueError naming ``source`` for a span outside the text, an overlap (when ``flat``) or a
        mention that disagrees with ``text[start:end]``.

        >>> validate_spans('我爱北京', [(2, 4, 'LOC')], source='a.json:3', mentions=['北京'])
        [(2, 4, 'LOC')]
    """
    spans = list(spans)
    where = f'{source}: '
    if mentions is not None:
        mentions = list(mentions)
        if len(mentions) != len(spans):
            raise ValueError(f'{where}{len(mentions)} mentions for {len(spans)} spans')
        for span, mention in zip(spans, mentions):
            _check_spans([span], len(text), False, where)
            if text[span[0]:span[1]] != mention:
                raise ValueError(f'{where}span {tuple(span)!r} covers {text[span[0]:span[1]]!r} but the '
                                 f'mention is {mention!r} (misaligned offsets?)')
    return _check_spans(spans, len(text), flat, where)


def spans_to_tags(spans, length, scheme='BIO'):
    """Tags of a sequence of ``length`` tokens holding the given flat spans.

    Args:
        spans: iterable of ``(start, end, label)`` token spans, end exclusive; no overlaps.
        length: int, number of tokens.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
    Returns:
        list of ``length`` tag strings.

        >>> spans_to_tags([(1, 2, 'PER')], 3, 'BIOES')
        ['O', 'S-PER', 'O']
    """
    scheme = _scheme(scheme)
    if scheme == SEG:
        raise ValueError("spans_to_tags: use words_to_tags for the 'SEG' scheme")
    tags = ['O'] * length
    previous_end, previous_label = -1, None
    for start, end, label in _check_spans(spans, length, flat=True):
        if scheme == 'IOB1':
            first = 'B' if (previous_end == start and previous_label == label) else 'I'
            prefixes = [first] + ['I'] * (end - start - 1)
        elif scheme == 'BIO':
            prefixes = ['B'] + ['I'] * (end - start - 1)
        else:
            prefixes = ['S'] if end - start == 1 else ['B'] + ['I'] * (end - start - 2) + ['E']
        tags[start:end] = [_format(p, label, scheme) for p in prefixes]
        previous_end, previous_label = end, label
    return tags


def iob1_to_iob2(tags):
    """Convert IOB1 tags (CoNLL-2003) to IOB2/BIO: an ``I-X`` that starts an entity becomes ``B-X``.

    Args:
        tags: list of str in IOB1.
    Returns:
        list of str in BIO, same length.

        >>> iob1_to_iob2(['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC'])
        ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
    """
    converted, previous_type = [], None
    for (prefix, kind), tag in zip(_parse_all(tags, 'IOB1'), tags):
        converted.append(f'B-{kind}' if prefix == 'I' and kind != previous_type else tag)
        previous_type = kind
    return converted


def _strict_spans(parsed, needs_end):
    """Spans of well-formed entities only (seqeval's strict mode); fragments are dropped.

    ``needs_end``: BIOES/BMES, where an entity must close with ``E-X``; in BIO it closes at the first
    token that does not continue it.
    """
    spans, current = [], None  # current: (start, type) of an open entity
    for i, (prefix, kind) in enumerate(parsed + [('O', None)]):
        if prefix == 'I' and current is not None and current[1] == kind:
            continue
        if prefix == 'E' and current is not None and current[1] == kind:
            spans.append((current[0], i + 1, kind))
        elif current is not None and not needs_end:
            spans.append((current[0], i, current[1]))
        current = (i, kind) if prefix == 'B' else None
        if prefix == 'S':
            spans.append((i, i + 1, kind))
    return spans


def _lenient_spans(parsed):
    """Spans by the conlleval chunking rules (seqeval's default mode): fragments become entities."""
    spans, start = [], None
    previous, previous_type = 'O', None
    for i, (prefix, kind) in enumerate(parsed + [('O', None)]):
        ends = (previous in 'ES' or (previous in 'BI' and prefix in 'BSO')
                or (previous != 'O' and previous_type != kind))
        if ends and start is not None:
            spans.append((start, i, previous_type))
            start = None
        if (prefix in 'BS' or (previous in 'ESO' and prefix in 'EI')
                or (prefix != 'O' and previous_type != kind)):
            start = i
        previous, previous_type = prefix, kind
    return spans


def tags_to_spans(tags, scheme='BIO', strict=True):
    """Entity spans encoded by a tag sequence.

    Args:
        tags: list of str tags of one sequence.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
        strict: True keeps only well-formed entities, like seqeval's ``mode='strict'`` (an ``I-X``
            after ``O`` is dropped); False follows the conlleval rules of seqeval's default mode
            (such a fragment starts an entity). IOB1 is always read by its own rule.
    Returns:
        list of ``(start, end, type)`` token spans, end exclusive, sorted.
    Raises:
        ValueError with the position of an unknown tag (e.g. ``'X-PER'``, ``'B_PER'``).

        >>> tags_to_spans(['B-PER', 'I-PER', 'O', 'I-LOC'])
        [(0, 2, 'PER')]
    """
    scheme = _scheme(scheme)
    if scheme == SEG:
        raise ValueError("tags_to_spans: use tags_to_words for the 'SEG' scheme")
    if scheme == 'IOB1':
        tags, scheme = iob1_to_iob2(tags), 'BIO'
    parsed = _parse_all(tags, scheme)
    if not strict:
        return _lenient_spans(parsed)
    return _strict_spans(parsed, needs_end=scheme in ('BIOES', 'BMES'))


def words_to_tags(words):
    """Word segmentation -> one 's', 'b', 'm' or 'e' tag per character.

    Args:
        words: list of non-empty str.
    Returns:
        list of str, one per character of ``''.join(words)``.

        >>> words_to_tags(['我们', '爱', '北京市'])
        ['b', 'e', 's', 'b', 'm', 'e']
    """
    tags = []
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word:
            raise ValueError(f'words_to_tags: word {i} is {word!r}, expected a non-empty string')
        tags.extend(['s'] if len(word) == 1 else ['b'] + ['m'] * (len(word) - 2) + ['e'])
    return tags


def tags_to_words(chars, tags):
    """Words from characters and their 's', 'b', 'm', 'e' tags.

    A word starts at a 'b' or 's' tag, after an 'e' or 's' tag, and at the first character, so
    an invalid sequence (e.g. 'm' after 'e') still yields every character exactly once.

    Args:
        chars: str or list of str (the characters).
        tags: list of str, same length.
    Returns:
        list of str whose concatenation is ``''.join(chars)``.

        >>> tags_to_words('我们爱北京', ['b', 'e', 's', 'b', 'e'])
        ['我们', '爱', '北京']
    """
    if len(chars) != len(tags):
        raise ValueError(f'tags_to_words: {len(chars)} characters but {len(tags)} tags')
    words = []
    for i, (char, tag) in enumerate(zip(chars, tags)):
        _parse(tag, SEG, i)
        if i == 0 or tag in 'bs' or tags[i - 1] in 'es':
            words.append(char)
        else:
            words[-1] += char
    return words


def label_list(types, scheme='BIO'):
    """The label order of a scheme: ``'O'`` first, then each type's prefixes in scheme order.

    Args:
        types: entity types; a list/tuple keeps its order, any other iterable (e.g. a set) is
            sorted. Ignored (may be None) for 'SEG', whose labels are ['s', 'b', 'm', 'e'].
        scheme: 'BIO', 'IOB1', 'BIOES', 'BMES' or 'SEG'.
    Returns:
        list of str labels; label id = index in this list.

        >>> label_list(['PER', 'LOC'])
        ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']
    """
    scheme = _scheme(scheme)
    if scheme == SEG:
        return list('sbme')
    types = list(types) if isinstance(types, (list, tuple)) else sorted(types)
    if len(set(types)) != len(types):
        raise ValueError(f'label_list: duplicate types in {types!r}')
    for kind in types:
        if not isinstance(kind, str) or not kind:
            raise ValueError(f'label_list: types must be non-empty strings, got {kind!r}')
    return ['O'] + [f'{prefix}-{kind}' for kind in types for prefix in _PREFIXES[scheme]]


def _transition_rules(scheme):
    """``(can_start, can_follow, can_end)`` predicates on parsed labels ``(prefix, type)``."""
    if scheme == 'BIO':
        return (lambda cur: cur[0] != 'I',
                lambda prev, cur: cur[0] != 'I' or (prev[0] in 'BI' and prev[1] == cur[1]),
                lambda prev: True)
    if scheme == 'IOB1':
        return (lambda cur: cur[0] != 'B',
                lambda prev, cur: cur[0] != 'B' or (prev[0] in 'BI' and prev[1] == cur[1]),
                lambda prev: True)
    # BIOES, BMES and SEG (read as BIOES without 'O'): inside an entity only I/E of its type follow.
    return (lambda cur: cur[0] in 'OBS',
            lambda prev, cur: (cur[0] in 'IE' and cur[1] == prev[1]) if prev[0] in 'BI'
            else cur[0] in 'OBS',
            lambda prev: prev[0] in 'OES')


def allowed_transitions(labels, scheme='BIO'):
    """Which label may follow which, and which may start or end a sequence (the CRF's constraints).

    Args:
        labels: list of L label strings (e.g. from ``label_list``).
        scheme: 'BIO', 'IOB1', 'BIOES', 'BMES' or 'SEG'.
    Returns:
        ``(allowed, allowed_starts, allowed_ends)``: NumPy bool arrays of shapes (L, L), (L,), (L,);
        ``allowed[i, j]`` says label j may follow label i.

        >>> allowed, starts, ends = allowed_transitions(label_list(['PER']), 'BIO')
        >>> allowed[0, 2], starts[2]   # O -> I-PER, start with I-PER
        (False, False)
    """
    import numpy as np
    scheme = _scheme(scheme)
    parsed = _parse_all(labels, scheme)
    can_start, can_follow, can_end = _transition_rules(scheme)
    allowed = np.array([[can_follow(prev, cur) for cur in parsed] for prev in parsed], dtype=bool)
    allowed = allowed.reshape(len(parsed), len(parsed))
    starts = np.array([can_start(cur) for cur in parsed], dtype=bool)
    ends = np.array([can_end(prev) for prev in parsed], dtype=bool)
    return allowed, starts, ends


def _token_bounds(mapping):
    """Per token ``(first_char, last_char + 1)`` from a rematch mapping, None for special tokens."""
    return [(min(chars), max(chars) + 1) if len(chars) else None for chars in mapping]


def char_spans_to_token_spans(mapping, spans, misaligned='raise'):
    """Character spans -> token spans through bert4keras's ``Tokenizer.rematch`` mapping.

    Characters the tokenizer dropped (spaces, control characters) belong to no token, so a span may
    start or end on them; a token merging characters inside and outside a span (e.g. ``'iPhone12'``
    for the span ``'iPhone'``) makes the span misaligned.

    Args:
        mapping: list over tokens of lists of character indices (``tokenizer.rematch(text, tokens)``);
            ``[]`` for [CLS], [SEP] and other special tokens.
        spans: iterable of ``(start, end, label)`` character spans, end exclusive.
        misaligned: what to do with a span that cuts a token or covers no token: 'raise'
            (ValueError), 'expand' (widen it to whole tokens; a span covering no token still
            raises) or 'drop'.
    Returns:
        list of ``(start, end, label)`` token spans, end exclusive, in the order of ``spans``.

        >>> mapping = tokenizer.rematch(text, tokens := tokenizer.tokenize(text))
        >>> char_spans_to_token_spans(mapping, [(2, 4, 'LOC')])
    """
    if misaligned not in ('raise', 'expand', 'drop'):
        raise ValueError(f"misaligned must be 'raise', 'expand' or 'drop', got {misaligned!r}")
    bounds = _token_bounds(mapping)
    owner = {char: k for k, chars in enumerate(mapping) for char in chars}
    token_spans = []
    for start, end, label in spans:
        inside = [owner[c] for c in range(start, end) if c in owner]
        if not inside:
            if misaligned == 'drop':
                continue
            raise ValueError(f'span {(start, end, label)!r} covers no token (only characters the '
                             'tokenizer dropped, or offsets beyond the text)')
        first, last = min(inside), max(inside)
        if bounds[first][0] < start or bounds[last][1] > end:
            if misaligned == 'drop':
                continue
            if misaligned == 'raise':
                raise ValueError(
                    f'span {(start, end, label)!r} does not fall on token boundaries: its tokens '
                    f'cover characters {bounds[first][0]}..{bounds[last][1]} (misaligned offsets, or '
                    "a token merging characters inside and outside the span; pass misaligned='expand' "
                    "or 'drop' to accept)")
        token_spans.append((first, last + 1, label))
    return token_spans


def token_spans_to_char_spans(mapping, spans):
    """Token spans -> character spans (the inverse of ``char_spans_to_token_spans``).

    Args:
        mapping: the rematch mapping (list over tokens of lists of character indices).
        spans: iterable of ``(start, end, label)`` token spans, end exclusive.
    Returns:
        list of ``(start, end, label)`` character spans, end exclusive: from the first character of
        the first non-special token to the last character of the last one.

        >>> token_spans_to_char_spans(mapping, [(3, 5, 'LOC')])
        [(2, 4, 'LOC')]
    """
    bounds = _token_bounds(mapping)
    char_spans = []
    for start, end, label in spans:
        if not 0 <= start < end <= len(bounds):
            raise ValueError(f'token span {(start, end, label)!r} is outside the {len(bounds)} tokens')
        inside = [b for b in bounds[start:end] if b is not None]
        if not inside:
            raise ValueError(f'token span {(start, end, label)!r} covers only special tokens')
        char_spans.append((inside[0][0], inside[-1][1], label))
    return char_spans


def offsets_to_tags(text, spans, scheme='BIO', mapping=None, misaligned='raise', source='<input>'):
    """Tags from character-offset spans, one per character or per token.

    Args:
        text: str.
        spans: iterable of ``(start, end, label)`` character spans, end exclusive, not overlapping.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
        mapping: None for one tag per character, or a rematch mapping (list over tokens of lists of
            character indices) for one tag per token; special tokens get 'O' (mask them).
        misaligned: 'raise', 'expand' or 'drop' for spans that cut a token (see
            ``char_spans_to_token_spans``).
        source: where the example comes from (``'file:line'``), used in error messages.
    Returns:
        list of str tags, ``len(text)`` of them or ``len(mapping)``.

        >>> offsets_to_tags('我爱北京', [(2, 4, 'LOC')])
        ['O', 'O', 'B-LOC', 'I-LOC']
    """
    spans = validate_spans(text, spans, source=source, flat=True)
    if mapping is None:
        return spans_to_tags(spans, len(text), scheme)
    try:
        token_spans = char_spans_to_token_spans(mapping, spans, misaligned)
    except ValueError as error:
        raise ValueError(f'{source}: {error} in text {text!r}') from None
    return spans_to_tags(token_spans, len(mapping), scheme)


def _propagated_prefixes(prefix, n, scheme):
    """Prefixes of the ``n`` pieces of a word tagged ``prefix`` when its label spreads to all pieces."""
    if prefix == 'O':
        return ['O'] * n
    if scheme in ('BIO', 'IOB1') or prefix == 'I':
        return [prefix] + ['I'] * (n - 1)
    if prefix == 'S' and n == 1:
        return ['S']
    first = 'I' if prefix == 'E' else 'B'
    last = 'I' if prefix == 'B' else 'E'
    return [first] + ['I'] * (n - 2) + [last] if n > 1 else [prefix]


def spread_labels(labels, piece_counts, strategy='propagate', scheme='BIO', ignore_label=None):
    """Per-piece labels of units (words, characters) that the tokenizer split into pieces.

    Strategies: 'propagate' gives every piece a label (a word's ``B-X`` on its first piece and
    ``I-X`` on the rest; in BIOES/BMES/SEG an ``E-X``/``S-X`` word ends with ``E-X``); 'first'
    labels only the first piece and gives the others ``ignore_label``, to be left out of loss and
    metrics. ``pieces_to_word_labels`` is the inverse.

    Args:
        labels: list of N tag strings in ``scheme``.
        piece_counts: list of N ints >= 1, the number of pieces of each unit.
        strategy: 'propagate' or 'first'.
        scheme: 'BIO', 'IOB1', 'BIOES', 'BMES' or 'SEG'.
        ignore_label: the label of the ignored pieces under 'first'.
    Returns:
        list of ``sum(piece_counts)`` labels.

        >>> spread_labels(['B-PER', 'O'], [2, 1])
        ['B-PER', 'I-PER', 'O']
        >>> spread_labels(['s', 'b', 'e'], [2, 1, 1], scheme='SEG')
        ['b', 'e', 'b', 'e']
    """
    scheme = _scheme(scheme)
    if strategy not in ('propagate', 'first'):
        raise ValueError(f"strategy must be 'propagate' or 'first', got {strategy!r}")
    if len(piece_counts) != len(labels):
        raise ValueError(f'{len(labels)} labels for {len(piece_counts)} units')
    out = []
    for i, ((prefix, kind), count) in enumerate(zip(_parse_all(labels, scheme), piece_counts)):
        if count < 1:
            raise ValueError(f'unit {i} has {count} pieces: every unit needs at least one')
        if strategy == 'first' or count == 1:
            out += [labels[i]] + [ignore_label] * (count - 1)
        else:
            out += [_format(p, kind, scheme) for p in _propagated_prefixes(prefix, count, scheme)]
    return out


def align_word_labels(words, labels, tokenizer, strategy='propagate', scheme='BIO',
                      ignore_label=None, maxlen=None):
    """WordPiece alignment of a word-level example (CoNLL): token ids, per-piece labels, word index.

    Each word is split by the tokenizer and labelled by :func:`spread_labels` (``strategy``
    'propagate' or 'first'); [CLS]/[SEP] get ``ignore_label`` and word index -1.

    Args:
        words: list of N str.
        labels: list of N tag strings in ``scheme`` (convert IOB1 with ``iob1_to_iob2`` first for BIO).
        tokenizer: a bert4keras ``Tokenizer`` (its ``_tokenize`` splits a word into pieces).
        strategy: 'propagate' or 'first'.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
        ignore_label: the label of ignored positions (e.g. None, or -100 after mapping to ids).
        maxlen: optional maximum number of tokens including [CLS]/[SEP]; later pieces are cut
            (``pieces_to_word_labels`` fills the words that lost all their pieces).
    Returns:
        ``(token_ids, piece_labels, word_index)``: three lists of length T (T <= maxlen).

        >>> ids, piece_labels, word_index = align_word_labels(['unaffable'], ['B-MISC'], tokenizer)
        >>> piece_labels   # [CLS] un ##aff ##able [SEP]
        [None, 'B-MISC', 'I-MISC', 'I-MISC', None]
    """
    if len(words) != len(labels):
        raise ValueError(f'align_word_labels: {len(words)} words but {len(labels)} labels')
    word_pieces = [tokenizer._tokenize(word) or [tokenizer._token_unk] for word in words]
    piece_labels = spread_labels(labels, [len(p) for p in word_pieces], strategy, scheme,
                                 ignore_label)
    pieces = [piece for p in word_pieces for piece in p]
    word_index = [i for i, p in enumerate(word_pieces) for _ in p]
    specials = [t for t in (tokenizer._token_start, tokenizer._token_end) if t is not None]
    if maxlen is not None:
        keep = maxlen - len(specials)
        if keep < 1:
            raise ValueError(f'maxlen={maxlen} leaves no room for pieces besides {specials}')
        pieces, piece_labels, word_index = pieces[:keep], piece_labels[:keep], word_index[:keep]
    if tokenizer._token_start is not None:
        pieces, piece_labels, word_index = ([tokenizer._token_start] + pieces,
                                            [ignore_label] + piece_labels, [-1] + word_index)
    if tokenizer._token_end is not None:
        pieces, piece_labels, word_index = (pieces + [tokenizer._token_end],
                                            piece_labels + [ignore_label], word_index + [-1])
    return tokenizer.tokens_to_ids(pieces), piece_labels, word_index


def pieces_to_word_labels(word_index, piece_labels, scheme='BIO', strategy='propagate',
                          n_words=None, fill='O'):
    """Word labels from piece labels (the inverse of ``align_word_labels``, e.g. on predictions).

    Each word takes its first piece's label; with strategy 'propagate' in BIOES/BMES the word's
    prefix also looks at its last piece (a word ends an entity when its last piece does).

    Args:
        word_index: list of T ints, the word of each piece (-1 for special tokens).
        piece_labels: list of T tag strings (predictions; special positions are ignored).
        scheme: 'BIO', 'IOB1', 'BIOES', 'BMES' or 'SEG'.
        strategy: 'propagate' or 'first', as used for alignment.
        n_words: number of words (default: largest word index + 1); words without any piece (cut by
            ``maxlen``) get ``fill``.
    Returns:
        list of ``n_words`` tag strings.

        >>> pieces_to_word_labels([-1, 0, 0, 1, -1], [None, 'B-LOC', 'I-LOC', 'O', None])
        ['B-LOC', 'O']
    """
    scheme = _scheme(scheme)
    if len(word_index) != len(piece_labels):
        raise ValueError(f'{len(word_index)} word indices but {len(piece_labels)} piece labels')
    first, last = {}, {}
    for position, index in enumerate(word_index):
        if index >= 0:
            first.setdefault(index, position)
            last[index] = position
    if n_words is None:
        n_words = max(first, default=-1) + 1
    labels = []
    for index in range(n_words):
        if index not in first:
            labels.append(fill)
            continue
        head = piece_labels[first[index]]
        prefix, kind = _parse(head, scheme, first[index])
        if strategy == 'propagate' and scheme in ('BIOES', 'BMES', SEG) and prefix != 'O':
            tail = _parse(piece_labels[last[index]], scheme, last[index])[0]
            starts, ends = prefix in 'BS', tail in 'ES'
            head = _format('S' if starts and ends else 'B' if starts else 'E' if ends else 'I',
                           kind, scheme)
        labels.append(head)
    return labels


_CLOSING = frozenset('"\'”’)）]】》」』')


def _sentence_cuts(text, separators):
    """Positions after each sentence end (a separator unit plus any closing quotes/brackets)."""
    separators = frozenset(separators)
    cuts, i = [], 0
    while i < len(text):
        if text[i] in separators:
            i += 1
            while i < len(text) and text[i] in _CLOSING:
                i += 1
            cuts.append(i)
        else:
            i += 1
    return cuts


def split_into_windows(text, maxlen, spans=(), separators='。！？；!?;\n', length=len):
    """Split a long text into consecutive windows that fit ``maxlen``, cutting at sentence ends.

    Each window is cut after the last sentence end that keeps it within ``maxlen``; a sentence that
    is too long alone is cut hard at the longest prefix that fits. No cut falls strictly inside one
    of ``spans`` (so gold spans survive the split; see ``spans_to_windows``).

    Args:
        text: str, or a list of units (e.g. words); offsets and spans count units.
        maxlen: int, the largest ``length(window)``.
        spans: optional iterable of ``(start, end, label)`` unit spans not to cut through.
        separators: collection of the units (characters) that end a sentence.
        length: function measuring a window (a slice of ``text``) (``len`` for characters, or e.g.
            ``lambda s: len(tokenizer.tokenize(s))`` for tokens including [CLS]/[SEP]); it must
            not decrease when a window grows.
    Returns:
        list of ``(offset, piece)`` pairs with ``piece == text[offset:offset + len(piece)]``; the
        pieces concatenate to ``text``.
    Raises:
        ValueError if a span (or a single character) cannot fit in ``maxlen``.

        >>> split_into_windows('今天很好。明天下雨！后天晴', 6)
        [(0, '今天很好。'), (5, '明天下雨！'), (10, '后天晴')]
    """
    if maxlen < 1:
        raise ValueError(f'maxlen must be at least 1, got {maxlen}')
    forbidden = set()
    for start, end, _ in _check_spans(spans, len(text), flat=False):
        forbidden.update(range(start + 1, end))
    cuts = [c for c in _sentence_cuts(text, separators) if c not in forbidden]
    windows, start = [], 0
    while start < len(text):
        low, high = start, len(text)  # the largest end with length(text[start:end]) <= maxlen
        while low < high:
            middle = (low + high + 1) // 2
            if length(text[start:middle]) <= maxlen:
                low = middle
            else:
                high = middle - 1
        end = low
        if end < len(text):
            k = bisect.bisect_right(cuts, end) - 1  # the last sentence end within the window
            if k >= 0 and cuts[k] > start:
                end = cuts[k]
            else:
                while end > start and end in forbidden:
                    end -= 1
        if end == start:
            raise ValueError(f'cannot split text at offset {start} into windows of maxlen={maxlen}: '
                             'a span or a character there does not fit')
        windows.append((start, text[start:end]))
        start = end
    return windows


def spans_to_windows(windows, spans):
    """Distribute character spans over windows, in window-local offsets.

    Args:
        windows: list of ``(offset, piece)`` from ``split_into_windows``.
        spans: iterable of ``(start, end, label)`` character spans of the whole text.
    Returns:
        list (one per window) of lists of local ``(start, end, label)`` spans.
    Raises:
        ValueError for a span that crosses a window boundary or lies outside every window.

        >>> spans_to_windows([(0, '今天很好。'), (5, '明天下雨')], [(5, 7, 'DATE')])
        [[], [(0, 2, 'DATE')]]
    """
    offsets = [offset for offset, _ in windows]
    local = [[] for _ in windows]
    for start, end, label in spans:
        k = bisect.bisect_right(offsets, start) - 1
        if k < 0 or end > offsets[k] + len(windows[k][1]):
            raise ValueError(f'span {(start, end, label)!r} crosses a window boundary or lies '
                             'outside the windows (pass the spans to split_into_windows)')
        local[k].append((start - offsets[k], end - offsets[k], label))
    return local


def merge_window_spans(windows_spans):
    """Map window-local spans (e.g. predictions per window) back to offsets in the whole text.

    Args:
        windows_spans: iterable of ``(offset, spans)`` pairs: a window's offset and its local
            ``(start, end, label)`` spans.
    Returns:
        sorted list of ``(start, end, label)`` spans of the whole text.

        >>> merge_window_spans([(0, []), (5, [(0, 2, 'DATE')])])
        [(5, 7, 'DATE')]
    """
    return sorted((offset + start, offset + end, label)
                  for offset, spans in windows_spans for start, end, label in spans)
