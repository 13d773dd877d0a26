"""Character offsets <-> token spans, word labels <-> piece labels (WordPiece alignment), offsets
-> tags.
"""
from crf_lr.data.tagging import spans_to_tags, spread_labels, validate_spans


def _token_bounds(mapping):
    """Per token ``(first_char, last_char + 1)`` from a rematch mapping, None for special tokens."""
    return [(min(chars), max(chars) + 1) if len(chars) else None for chars in mapping]


def char_spans_to_token_spans(mapping, spans, misaligned='raise'):
    """Character spans -> token spans through bert4keras's ``Tokenizer.rematch`` mapping.

    Characters the tokenizer dropped (spaces, control characters) belong to no token, so a span may
    start or end on them; a token merging characters inside and outside a span (e.g. ``'iPhone12'``
    for the span ``'iPhone'``) makes the span misaligned.

    Args:
        mapping: list over tokens of lists of character indices (``tokenizer.rematch(text,
        tokens)``);
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
                    f'cover characters {bounds[first][0]}..{bounds[last][1]} (misaligned offsets, '
                    "or a token merging characters inside and outside the span; pass "
                    "misaligned='expand' or 'drop' to accept)")
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
            raise ValueError(f'token span {(start, end, label)!r} is outside the {len(bounds)} '
                             'tokens')
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



def align_word_labels(words, labels, tokenizer, strategy='propagate', scheme='BIO',
                      ignore_label=None, maxlen=None):
    """WordPiece alignment of a word-level example (CoNLL): token ids, per-piece labels, word index.

    Each word is split by the tokenizer and labelled by :func:`spread_labels` (``strategy``
    'propagate' or 'first'); [CLS]/[SEP] get ``ignore_label`` and word index -1.

    Args:
        words: list of N str.
        labels: list of N tag strings in ``scheme`` (convert IOB1 with ``iob1_to_iob2`` first for
        BIO). tokenizer: a bert4keras ``Tokenizer`` (its ``_tokenize`` splits a word into pieces).
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
