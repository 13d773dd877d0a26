"""Texts longer than a window: cut at sentence ends (or pauses), spans carried into windows and
merged back.
"""
import bisect

from crf_lr.data.tagging import _check_spans


_CLOSING = '"\'”’)）]】》」』'
# the characters that end a sentence of characters; not '.', which in Chinese text is a decimal
# point, a list number's or a URL's, hardly ever an English sentence's full stop
SENTENCE_ENDS = '。！？；!?;\n'
WORD_SENTENCE_ENDS = SENTENCE_ENDS + '.…'     # a word of these ends a sentence of words


def _sentence_cuts(text, separators):
    """Positions after each sentence end: a unit made of ``separators`` characters and closing
    quotes/brackets (a character, or a word such as '.', '...', '!?', '."'; not 'U.S.', 'Mr.' or
    '3.5'), plus any closing quote/bracket units after it."""
    marks, cuts, i = ''.join(separators), [], 0
    while i < len(text):
        body = text[i].rstrip(_CLOSING)
        i += 1
        if body and not body.lstrip(marks):
            while i < len(text) and not text[i].lstrip(_CLOSING):
                i += 1
            cuts.append(i)
    return cuts


PAUSES = '，,、：: \u3000'   # where prediction cuts a sentence too long for a window


def _last_cut_within(cuts, start, end):
    """The last of the sorted ``cuts`` in ``(start, end]``, or None."""
    k = bisect.bisect_right(cuts, end) - 1
    return cuts[k] if k >= 0 and cuts[k] > start else None


def split_into_windows(text, maxlen, spans=(), separators=None, length=len, pauses=()):
    """Split a long text into consecutive windows that fit ``maxlen``, cutting at sentence ends.

    Each window is cut after the last sentence end that keeps it within ``maxlen``; a sentence that
    is too long alone is cut after its last pause in the window (``pauses``: e.g. commas), else
    hard at the longest prefix that fits. No cut falls strictly inside one
    of ``spans`` (so gold spans survive the split; see ``spans_to_windows``).

    Args:
        text: str, or a list of units (e.g. words); offsets and spans count units.
        maxlen: int, the largest ``length(window)``.
        spans: optional iterable of ``(start, end, label)`` unit spans not to cut through.
        separators: the characters (each one character) that end a sentence: a unit made of
            them (and closing quotes/brackets) ends one; default ``SENTENCE_ENDS`` for a str,
            ``WORD_SENTENCE_ENDS`` (with '.') for a list (of words: :func:`windows_of` passes the
            encoder's, so a list of characters keeps '.' inside '3.5').
        pauses: the characters after which (a unit made of them) a sentence too long for a window
            is cut (prediction passes ``PAUSES``; training keeps its windows as they were).
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
    if separators is None:
        separators = SENTENCE_ENDS if isinstance(text, str) else WORD_SENTENCE_ENDS
    forbidden = set()
    for start, end, _ in _check_spans(spans, len(text), flat=False):
        forbidden.update(range(start + 1, end))
    cuts = [c for c in _sentence_cuts(text, separators) if c not in forbidden]
    pause_cuts = [c for c in _sentence_cuts(text, pauses) if c not in forbidden]
    windows, start = [], 0
    while start < len(text):
        # the largest end with length(text[start:end]) <= maxlen: doubling steps bound it, then
        # bisection; each measured slice is at most twice the window (a long text stays linear)
        low, high, step = start, len(text), 1
        while start + step <= len(text):
            if length(text[start:start + step]) > maxlen:
                high = start + step - 1
                break
            low, step = start + step, step * 2
        while low < high:
            middle = (low + high + 1) // 2
            if length(text[start:middle]) <= maxlen:
                low = middle
            else:
                high = middle - 1
        end = low
        if end < len(text):
            cut = _last_cut_within(cuts, start, end) or _last_cut_within(pause_cuts, start, end)
            if cut:
                end = cut
            else:
                while end > start and end in forbidden:
                    end -= 1
        if end == start:
            raise ValueError(f'cannot split text at offset {start} into windows of '
                             f'maxlen={maxlen}: a span or a character there does not fit')
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
