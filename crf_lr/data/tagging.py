"""Tagging schemes: spans <-> tags, allowed transitions, repair of messy tags, offsets -> tags,
WordPiece alignment, windows.

Spans are ``(start, end, label)`` tuples with ``end`` EXCLUSIVE, in character or token indices as
each function says. Every scheme is one :class:`Scheme` object in the table :data:`SCHEMES` (BIO,
IOB1, BIOES, BMES, SEG; see each object's ``description``); :func:`get_scheme` turns a name
(case-insensitive, aliases IOB2 and IOBES) into one. The functions below (``spans_to_tags``,
``tags_to_spans``, ``label_list``, ...) take a scheme name or object and call its methods.

Pure Python; no TensorFlow. bert4keras's ``Tokenizer`` is only used through an object passed in.

    >>> spans_to_tags([(0, 2, 'LOC')], 3)
    ['B-LOC', 'I-LOC', 'O']
    >>> get_scheme('bmes').repair(['O', 'M-LOC', 'E-LOC'])      # a stray M-X opens an entity
    (['O', 'B-LOC', 'E-LOC'], 1)
"""
import dataclasses
import operator


WORD = 'w'
REPAIR_HINT = ('(the readers repair such tags by the conlleval rule unless told not to: drop '
               '--strict, or pass repair=True)')


def echo(value, limit=80, show=repr):
    """``show(value)`` (``repr`` by default) cut to ``limit`` characters with an ellipsis: file
    content quoted in a message.

        >>> echo('x' * 1000, limit=10)
        "'xxxxxxxxx… (1002 characters)"
    """
    text = show(value)
    return text if len(text) <= limit else f'{text[:limit]}… ({len(text)} characters)'


class TagError(ValueError):
    """A tag sequence that breaks its scheme: a stray ``I-X``, an entity never closed.

    Attributes:
        position: int, index of the tag where the fault shows.
        fault: str, what is wrong (naming the tags and where they stand), ending with
            :data:`REPAIR_HINT`; readers prefix it with ``path:line:``.
    """

    def __init__(self, message, position, fault):
        super().__init__(message)
        self.position, self.fault = position, fault


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
                raise ValueError(f'{where}spans {previous!r} and {span!r} overlap (nested '
                                 'entities): flat tag schemes cannot represent them; use span '
                                 'labels (GlobalPointer) for nested entities')
    return checked


def validate_spans(text, spans, source='<input>', mentions=None, flat=False):
    """Check spans against their text and return them sorted as tuples.

    Args:
        text: str, the text the character offsets refer to.
        spans: iterable of ``(start, end, label)``, end exclusive.
        source: str naming where the spans come from, e.g. ``'train.json:12'``; starts every
        message. mentions: optional list of str parallel to ``spans``: the mention text each span
        must cover. flat: if True, overlapping (nested) spans are an error too.
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
                raise ValueError(f'{where}span {tuple(span)!r} covers '
                                 f'{echo(text[span[0]:span[1]])} but the mention is '
                                 f'{echo(mention)} (misaligned offsets?)')
    return _check_spans(spans, len(text), flat, where)


def _strict_spans(parsed, needs_end):
    """Spans of well-formed entities only (seqeval's strict mode); fragments are dropped.

    ``parsed``: ``(role, type)`` pairs. ``needs_end``: BIOES/BMES, where an entity must close with
    ``E-X``; in BIO it closes at the first token that does not continue it.
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


@dataclasses.dataclass(frozen=True)
class Scheme:
    """A tagging scheme: its labels, the moves between them, spans <-> tags, checks and repair.

    Tags are read into roles: ``B`` begins an entity, ``I`` continues it, ``E`` ends it, ``S`` is a
    one-token entity, ``O`` is outside. Use the objects of :data:`SCHEMES` (or :func:`get_scheme`);
    the module-level functions are the same methods under their older names.

    Attributes:
        name: the scheme's name: BIO, IOB1, BIOES, BMES or SEG.
        segmentation: True for SEG only: its tags carry no type and its spans are words
            ``(start, end, 'w')`` that cover every unit.
        letters: the tag prefixes in label order as written (BMES ``'BMES'``, SEG ``'sbme'``).
        roles: the role of each letter (BMES's ``M`` and SEG's ``m`` continue: role ``I``).
        starts_inside: IOB1 only: an entity begins with ``I-X``, and ``B-X`` only begins one right
            after an entity of the same type.
        aliases: other names :func:`get_scheme` accepts.
        description: one line for people.

        >>> bioes = get_scheme('iobes')
        >>> bioes.encode([(0, 2, 'PER'), (3, 4, 'LOC')], 4), bioes.labels(['PER'])
        (['B-PER', 'E-PER', 'O', 'S-LOC'], ['O', 'B-PER', 'I-PER', 'E-PER', 'S-PER'])
    """
    name: str
    segmentation: bool = False
    letters: str = 'BI'
    roles: str = 'BI'
    starts_inside: bool = False
    aliases: tuple = ()
    description: str = ''
    _role: dict = dataclasses.field(init=False, repr=False, compare=False)
    _letter: dict = dataclasses.field(init=False, repr=False, compare=False)
    _known: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, '_role', dict(zip(self.letters, self.roles)))
        object.__setattr__(self, '_letter', dict(zip(self.roles, self.letters)))

    def __str__(self):
        return self.name

    @property
    def closed(self):
        """True when an entity must end with an ``E`` or ``S`` tag (BIOES, BMES, SEG)."""
        return 'E' in self.roles

    @property
    def _bound(self):
        """The role that must continue an entity of its type (BIO: I; IOB1: B; none when closed)."""
        return 'B' if self.starts_inside else 'I'

    # ------------------------------------------------------------------ reading and writing tags
    def parse(self, tag, position=None):
        """``(role, type)`` of one tag: ``('O', None)`` for ``'O'``, type None in SEG.

        Raises ValueError naming the tag, ``position`` (when given) and the scheme for a tag the
        scheme does not have (e.g. ``'X-PER'``, ``'B_PER'``, ``'M-PER'`` in BIO).

            >>> get_scheme('BMES').parse('M-LOC')
            ('I', 'LOC')
        """
        if self.segmentation:
            if isinstance(tag, str) and tag in self._role:
                return self._role[tag], None
            expected = 'one of ' + ', '.join(map(repr, self.letters))
        else:
            if tag == 'O':
                return 'O', None
            if isinstance(tag, str) and len(tag) > 2 and tag[1] == '-' and tag[0] in self._role:
                return self._role[tag[0]], tag[2:]
            expected = (f"'O' or one of {', '.join(p + '-' for p in self.letters)} followed by a "
                        "type")
        where = '' if position is None else f' at position {position}'
        raise ValueError(f'unknown tag {tag!r}{where} for scheme {self.name}: expected {expected}')

    def _parse_all(self, tags):
        """``parse`` of every tag; the parsed tags are kept, as a file repeats a few tags millions
        of times."""
        known = self._known
        try:
            return [known[tag] for tag in tags]
        except (KeyError, TypeError):
            if len(known) > 100000:
                known.clear()
            for i, tag in enumerate(tags):
                if not isinstance(tag, str) or tag not in known:
                    known[tag] = self.parse(tag, i)
            return [known[tag] for tag in tags]

    def _format(self, role, kind):
        if self.segmentation:
            return self._letter[role]
        return 'O' if role == 'O' else f'{self._letter[role]}-{kind}'

    def labels(self, types=None):
        """The label order: ``'O'`` first, then each type's tags in ``letters`` order.

        Args:
            types: entity types; a list/tuple keeps its order, any other iterable (e.g. a set) is
                sorted. Ignored by SEG, whose labels are ``['s', 'b', 'm', 'e']``.
        Returns:
            list of str labels; label id = index in this list.

            >>> get_scheme('BIO').labels(['PER', 'LOC'])
            ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']
        """
        if self.segmentation:
            return list(self.letters)
        if types is None:
            raise ValueError(f'{self.name} labels need the entity types, got types=None')
        types = list(types) if isinstance(types, (list, tuple)) else sorted(types)
        if len(set(types)) != len(types):
            raise ValueError(f'label_list: duplicate types in {types!r}')
        for kind in types:
            if not isinstance(kind, str) or not kind:
                raise ValueError(f'label_list: types must be non-empty strings, got {kind!r}')
        return ['O'] + [f'{letter}-{kind}' for kind in types for letter in self.letters]

    # ------------------------------------------------------------------ transitions
    def _can_start(self, role):
        return role in 'OBS' if self.closed else role != self._bound

    def _can_follow(self, previous, current):
        if self.closed:   # inside an entity only I/E of its type follow
            if previous[0] in 'BI':
                return current[0] in 'IE' and current[1] == previous[1]
            return current[0] in 'OBS'
        return current[0] != self._bound or (previous[0] in 'BI' and previous[1] == current[1])

    def _can_end(self, role):
        return role in 'OES' if self.closed else True

    def allowed(self, labels):
        """Which label may follow which, and which may start or end a sequence (CRF constraints).

        Args:
            labels: list of L label strings (e.g. from :meth:`labels`).
        Returns:
            ``(allowed, allowed_starts, allowed_ends)``: NumPy bool arrays of shapes (L, L), (L,),
            (L,); ``allowed[i, j]`` says label j may follow label i.

            >>> allowed, starts, ends = get_scheme('BIO').allowed(['O', 'B-PER', 'I-PER'])
            >>> allowed[0, 2], starts[2]   # O -> I-PER, start with I-PER
            (False, False)
        """
        import numpy as np
        parsed = self._parse_all(labels)
        allowed = np.array([[self._can_follow(previous, current) for current in parsed]
                            for previous in parsed], dtype=bool).reshape(len(parsed), len(parsed))
        starts = np.array([self._can_start(role) for role, _ in parsed], dtype=bool)
        ends = np.array([self._can_end(role) for role, _ in parsed], dtype=bool)
        return allowed, starts, ends

    # ------------------------------------------------------------------ spans <-> tags
    def encode(self, spans, length):
        """Tags of ``length`` tokens holding the given flat spans.

        Args:
            spans: iterable of ``(start, end, label)`` token spans, end exclusive, not overlapping;
                for SEG, word spans that cover ``0..length`` one after another (labels ignored).
            length: int, number of tokens.
        Returns:
            list of ``length`` tag strings.

            >>> SEG.encode([(0, 2, 'w'), (2, 3, 'w')], 3)
            ['b', 'e', 's']
        """
        spans = _check_spans(spans, length, flat=True)
        if self.segmentation:
            covered = 0
            for start, end, _ in spans:
                if start != covered:
                    break
                covered = end
            if covered != length:
                raise ValueError(f'{self.name}: word spans must cover the {length} units one after '
                                 f'another, but unit {covered} is in no word')
        tags = ['O'] * length
        previous_end, previous_label = -1, None
        for start, end, label in spans:
            n = end - start
            if self.starts_inside:
                roles = ['B' if (previous_end, previous_label) == (start, label) else 'I']
                roles += ['I'] * (n - 1)
            elif self.closed:
                roles = ['S'] if n == 1 else ['B'] + ['I'] * (n - 2) + ['E']
            else:
                roles = ['B'] + ['I'] * (n - 1)
            tags[start:end] = [self._format(role, label) for role in roles]
            previous_end, previous_label = end, label
        return tags

    def decode(self, tags, strict=True):
        """Spans encoded by a tag sequence.

        Args:
            tags: list of str tags of one sequence.
            strict: True keeps only well-formed entities, like seqeval's ``mode='strict'`` (an
                ``I-X`` after ``O`` is dropped); False follows the conlleval rules of seqeval's
                default mode (such a fragment starts an entity). IOB1 is always read by its own
                rule (conlleval's); SEG always yields words covering every unit (a word starts at
                ``b``/``s``, after ``e``/``s`` and at the first unit).
        Returns:
            list of ``(start, end, type)`` token spans, end exclusive, sorted; SEG: ``(start, end,
            'w')``.
        Raises:
            ValueError with the position of an unknown tag.

            >>> get_scheme('BIO').decode(['B-PER', 'I-PER', 'O', 'I-LOC'])
            [(0, 2, 'PER')]
            >>> SEG.decode(['b', 'e', 's', 'm', 'e'])
            [(0, 2, 'w'), (2, 3, 'w'), (3, 5, 'w')]
        """
        parsed = self._parse_all(tags)
        if self.segmentation:
            return [(start, end, WORD) for start, end, _ in _lenient_spans(parsed)]
        if self.starts_inside or not strict:
            return _lenient_spans(parsed)
        return _strict_spans(parsed, needs_end=self.closed)

    # ------------------------------------------------------------------ faults and repair
    def _walk(self, tags, name):
        """conlleval's reading of ``tags``: ``(repaired, faults)``, the ``(role, type)`` of each tag
        after repair and the ``(position, fault)`` of each fault met (``name(i)`` names token i)."""
        parsed = self._parse_all(tags)
        fixed, faults = list(parsed), []
        noun = 'word' if self.segmentation else 'entity'

        def follows(i):
            return f'it follows {tags[i - 1]!r}' if i else 'it opens the sentence'

        if not self.closed:   # BIO: an I-X continues an X entity; IOB1: a B-X follows one
            for i, (role, kind) in enumerate(parsed):
                if role != self._bound or (i and parsed[i - 1][0] != 'O' and parsed[i - 1][1]
                                           == kind):
                    continue
                if self.starts_inside:
                    fault = (f'{tags[i]!r} is not right after a {kind} entity ({follows(i)}; in '
                             'IOB1 an entity begins with I-, and B- only separates two adjacent '
                             'ones of a type)')
                else:
                    fault = f'{tags[i]!r} continues no {noun} ({follows(i)})'
                faults.append((i, fault))
                fixed[i] = ('I' if self.starts_inside else 'B', kind)
            return fixed, faults

        def close(i, after):   # the open entity ends at token i (its last tag becomes E, or S)
            single = fixed[i][0] == 'B'
            expected = f'expected {self._format("E", fixed[i][1])!r} {after}'
            if single:
                expected += f', or {self._format("S", fixed[i][1])!r} for a one-token {noun}'
            fixed[i] = ('S' if single else 'E', fixed[i][1])
            return expected

        opened = None   # index of the tag that opened the current entity
        for i, (role, kind) in enumerate(parsed):
            if opened is not None and not (role in 'IE' and kind == parsed[opened][1]):
                expected = close(i - 1, f'before {tags[i]!r}')
                faults.append((i, f'the {noun} opened by {tags[opened]!r} at {name(opened)} is '
                                  f'never closed ({expected})'))
                opened = None
            if role in 'IE' and opened is None:
                verb = 'continues' if role == 'I' else 'ends'
                faults.append((i, f'{tags[i]!r} {verb} no {noun} ({follows(i)})'))
                role = 'B' if role == 'I' else 'S'
                fixed[i] = (role, kind)
            if role == 'B':
                opened = i
            elif role != 'I':
                opened = None
        if opened is not None:
            last = len(tags) - 1
            expected = close(last, f'at the end of the sentence, got {tags[last]!r}')
            faults.append((last, f'the {noun} opened by {tags[opened]!r} at {name(opened)} is '
                                 f'never closed ({expected})'))
        return fixed, faults

    def check(self, tags, where='', lines=None):
        """Raise :class:`TagError` at the first tag that breaks the scheme, naming the real fault.

        Faults: BIO ``I-X`` after ``O``, after another type or first (it continues no entity); IOB1
        ``B-X`` not right after an X entity; BIOES/BMES/SEG an ``I``/``M``/``E`` tag with no open
        entity of its type, or an entity never closed by ``E-X``. Every message ends with
        :data:`REPAIR_HINT`.

        Args:
            tags: list of str tags of one sequence.
            where: prefix of the message, e.g. ``'dev.txt: '``.
            lines: optional list of the tags' line numbers in a file: positions are then named
                ``line N`` instead of ``token N``.
        Raises:
            TagError (a ValueError) with ``position`` and ``fault``; ValueError for an unknown tag.

            >>> get_scheme('BIOES').check(['O', 'B-ORG', 'I-ORG', 'O'])
            TagError: token 3: the entity opened by 'B-ORG' at token 1 is never closed (expected
            'E-ORG' before 'O') (the readers repair such tags by the conlleval rule unless told
            not to: drop --strict, or pass repair=True)
        """
        name = (lambda i: f'token {i}') if lines is None else (lambda i: f'line {lines[i]}')
        _, faults = self._walk(tags, name)
        if faults:
            position, fault = faults[0]
            fault = f'{fault} {REPAIR_HINT}'
            raise TagError(f'{where}{name(position)}: {fault}', position, fault)

    def valid(self, tags):
        """True when :meth:`check` passes (every entity well formed).

            >>> get_scheme('BIO').valid(['O', 'I-PER']), get_scheme('IOB1').valid(['O', 'I-PER'])
            (False, True)
        """
        return not self._walk(tags, str)[1]

    def repair(self, tags):
        """Fix the faults :meth:`check` names by the conlleval rule.

        A stray ``I-X`` (BIO: after ``O`` or another type; BIOES/BMES/SEG: an I/M/E tag with no open
        entity of type X) starts a new entity (``B-X``, or ``S-X`` for a stray ``E-X``); an unclosed
        BIOES/BMES/SEG entity is closed at its last token (``E-X``, or ``S-X`` for a lone ``B-X``);
        IOB1's ``B-X`` that follows no X entity becomes ``I-X``. The spans of the result are those
        of ``decode(tags, strict=False)``.

        Args:
            tags: list of str tags of one sequence.
        Returns:
            ``(repaired, count)``: the list of tags and the number of tags changed.

            >>> get_scheme('BIOES').repair(['B-ORG', 'I-ORG', 'O', 'I-PER'])
            (['B-ORG', 'E-ORG', 'O', 'S-PER'], 2)
        """
        fixed, _ = self._walk(tags, str)
        repaired = [self._format(*new) if new != old else tag
                    for tag, new, old in zip(tags, fixed, self._parse_all(tags))]
        return repaired, sum(new != tag for new, tag in zip(repaired, tags))

    # ------------------------------------------------------------------ units split into pieces
    def _propagated_roles(self, role, n):
        """Roles of the ``n`` pieces of a unit tagged ``role`` when its label spreads to all pieces.
        """
        if role == 'O':
            return ['O'] * n
        if not self.closed or role == 'I':
            return [role] + ['I'] * (n - 1)
        if n == 1:
            return [role]
        return ['I' if role == 'E' else 'B'] + ['I'] * (n - 2) + ['I' if role == 'B' else 'E']

    def spread(self, labels, piece_counts, strategy='propagate', ignore_label=None):
        """Per-piece labels of units (words, characters) that the tokenizer split into pieces.

        Strategies: 'propagate' gives every piece a label (a unit's ``B-X`` on its first piece and
        ``I-X`` on the rest; in BIOES/BMES/SEG an ``E-X``/``S-X`` unit ends with ``E-X``); 'first'
        labels only the first piece and gives the others ``ignore_label``, to be left out of loss
        and metrics. :meth:`collect` is the inverse.

        Args:
            labels: list of N tag strings.
            piece_counts: list of N ints >= 1, the number of pieces of each unit.
            strategy: 'propagate' or 'first'.
            ignore_label: the label of the ignored pieces under 'first'.
        Returns:
            list of ``sum(piece_counts)`` labels.

            >>> get_scheme('BIO').spread(['B-PER', 'O'], [2, 1])
            ['B-PER', 'I-PER', 'O']
            >>> get_scheme('seg').spread(['s', 'b', 'e'], [2, 1, 1])
            ['b', 'e', 'b', 'e']
        """
        if strategy not in ('propagate', 'first'):
            raise ValueError(f"strategy must be 'propagate' or 'first', got {strategy!r}")
        if len(piece_counts) != len(labels):
            raise ValueError(f'{len(labels)} labels for {len(piece_counts)} units')
        out = []
        for i, ((role, kind), count) in enumerate(zip(self._parse_all(labels), piece_counts)):
            if count < 1:
                raise ValueError(f'unit {i} has {count} pieces: every unit needs at least one')
            if strategy == 'first' or count == 1:
                out += [labels[i]] + [ignore_label] * (count - 1)
            else:
                out += [self._format(r, kind) for r in self._propagated_roles(role, count)]
        return out

    def collect(self, word_index, piece_labels, n_words=None, strategy='propagate', fill='O'):
        """Unit labels from piece labels (the inverse of :meth:`spread`, e.g. on predictions).

        Each unit takes its first piece's label; with strategy 'propagate' in BIOES/BMES/SEG the
        unit's role also looks at its last piece (a unit ends an entity when its last piece does,
        or is O: the entity closed within the unit, as in pieces ``S-PER O``).

        Args:
            word_index: list of T ints, the unit of each piece (-1 for special tokens).
            piece_labels: list of T tag strings (special positions are ignored).
            n_words: number of units (default: largest index + 1); units without any piece (cut by
                ``maxlen``) get ``fill``.
            strategy: 'propagate' or 'first', as used for :meth:`spread`.
        Returns:
            list of ``n_words`` tag strings.

            >>> get_scheme('BIO').collect([-1, 0, 0, 1, -1], [None, 'B-LOC', 'I-LOC', 'O', None])
            ['B-LOC', 'O']
        """
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
            role, kind = self.parse(head, first[index])
            if strategy == 'propagate' and self.closed and role != 'O':
                tail = self.parse(piece_labels[last[index]], last[index])[0]
                starts, ends = role in 'BS', tail in 'ESO'
                head = self._format('S' if starts and ends else 'B' if starts else
                                    'E' if ends else 'I', kind)
            labels.append(head)
        return labels


BIO = Scheme('BIO', aliases=('IOB2',),
             description='B-X begins an entity, I-X continues it, O is outside')
IOB1 = Scheme('IOB1', starts_inside=True,
              description='an entity begins with I-X; B-X only begins one right after an X entity '
                          '(CoNLL-2003 as first released)')
BIOES = Scheme('BIOES', letters='BIES', roles='BIES', aliases=('IOBES',),
               description='B-X I-X* E-X for entities of several tokens, S-X for one token')
BMES = Scheme('BMES', letters='BMES', roles='BIES',
              description="BIOES spelt with M-X for I-X (the People's Daily / MSRA files)")
SEG = Scheme('SEG', segmentation=True, letters='sbme', roles='SBIE',
             description="word segmentation: one of 's' 'b' 'm' 'e' per character (single, begin, "
                         "middle, end); spans are words labelled 'w'")
SCHEMES = {scheme.name: scheme for scheme in (BIO, IOB1, BIOES, BMES, SEG)}
_BY_NAME = {name: scheme for scheme in SCHEMES.values() for name in (scheme.name,) + scheme.aliases}


def get_scheme(scheme):
    """The :class:`Scheme` named ``scheme`` (case-insensitive; IOB2 = BIO, IOBES = BIOES).

    A Scheme passes through. Raises ValueError listing the names for an unknown one.

        >>> get_scheme('iobes') is SCHEMES['BIOES']
        True
    """
    if isinstance(scheme, Scheme):
        return scheme
    found = _BY_NAME.get(str(scheme).upper())
    if found is None:
        raise ValueError(f'unknown tag scheme {scheme!r}: expected one of {sorted(_BY_NAME)}')
    return found


# --------------------------------------------------------------------------------------------------
# The same rules as functions of a scheme name (the schemes' methods under their older names)

def tag_types(tags, scheme='BIO'):
    """The entity type of each tag, None for ``'O'``, whatever its prefix.

        >>> tag_types(['B-LOC', 'O', 'I-PER'])
        ['LOC', None, 'PER']
    """
    return [kind for _, kind in get_scheme(scheme)._parse_all(tags)]


def label_list(types, scheme='BIO'):
    """``get_scheme(scheme).labels(types)``: ``'O'``, then each type's tags.

        >>> label_list(['PER', 'LOC'])
        ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']
    """
    return get_scheme(scheme).labels(types)


def allowed_transitions(labels, scheme='BIO'):
    """``get_scheme(scheme).allowed(labels)``: ``(allowed, starts, ends)`` bool arrays (L, L), (L,),
    (L,).

        >>> allowed, starts, ends = allowed_transitions(label_list(['PER']), 'BIO')
        >>> allowed[0, 2], starts[2]   # O -> I-PER, start with I-PER
        (False, False)
    """
    return get_scheme(scheme).allowed(labels)


def spans_to_tags(spans, length, scheme='BIO'):
    """``get_scheme(scheme).encode(spans, length)``: tags of ``length`` tokens holding flat spans.

        >>> spans_to_tags([(1, 2, 'PER')], 3, 'BIOES')
        ['O', 'S-PER', 'O']
    """
    return get_scheme(scheme).encode(spans, length)


def tags_to_spans(tags, scheme='BIO', strict=True):
    """``get_scheme(scheme).decode(tags, strict)``: ``(start, end, type)`` spans, end exclusive.

        >>> tags_to_spans(['B-PER', 'I-PER', 'O', 'I-LOC'])
        [(0, 2, 'PER')]
    """
    return get_scheme(scheme).decode(tags, strict)


def iob1_to_iob2(tags):
    """Convert IOB1 tags (CoNLL-2003) to IOB2/BIO: an ``I-X`` that starts an entity becomes ``B-X``.

        >>> iob1_to_iob2(['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC'])
        ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
    """
    return BIO.encode(IOB1.decode(tags), len(tags))


def words_to_tags(words):
    """Word segmentation -> one 's', 'b', 'm' or 'e' tag per character.

    Args:
        words: list of non-empty str.
    Returns:
        list of str, one per character of ``''.join(words)``.

        >>> words_to_tags(['我们', '爱', '北京市'])
        ['b', 'e', 's', 'b', 'm', 'e']
    """
    spans, start = [], 0
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word:
            raise ValueError(f'words_to_tags: word {i} is {word!r}, expected a non-empty string')
        spans.append((start, start + len(word), WORD))
        start += len(word)
    return SEG.encode(spans, start)


def tags_to_words(chars, tags):
    """Words from characters and their 's', 'b', 'm', 'e' tags (the words of ``SEG.decode(tags)``).

    Any sequence, even an invalid one (e.g. 'm' after 'e'), yields every character exactly once.

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
    return [''.join(chars[start:end]) for start, end, _ in SEG.decode(tags)]


def spread_labels(labels, piece_counts, strategy='propagate', scheme='BIO', ignore_label=None):
    """``get_scheme(scheme).spread(labels, piece_counts, strategy, ignore_label)``.

        >>> spread_labels(['B-PER', 'O'], [2, 1])
        ['B-PER', 'I-PER', 'O']
    """
    return get_scheme(scheme).spread(labels, piece_counts, strategy, ignore_label)


def pieces_to_word_labels(word_index, piece_labels, scheme='BIO', strategy='propagate',
                          n_words=None, fill='O'):
    """``get_scheme(scheme).collect(word_index, piece_labels, n_words, strategy, fill)``.

        >>> pieces_to_word_labels([-1, 0, 0, 1, -1], [None, 'B-LOC', 'I-LOC', 'O', None])
        ['B-LOC', 'O']
    """
    return get_scheme(scheme).collect(word_index, piece_labels, n_words, strategy, fill)
