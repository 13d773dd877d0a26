"""BERT WordPiece tokenisation of pre-split words, in plain Python (no TensorFlow, no bert4keras).

The rules of BERT's uncased tokenizer as bert4keras 0.11.5 applies them: lower-case and strip
accents, split off punctuation, drop control characters, then greedy longest-match-first
WordPiece (``##`` continuations); a word that cannot be split is ``[UNK]``.

    >>> tokenizer = WordPieceTokenizer('vocab.txt')
    >>> tokenizer.encode(['Unaffable', 'men'])     # ([101, ...pieces..., 102], [0, 3, 4])
"""
import unicodedata


def _is_punctuation(char):
    code = ord(char)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(char).startswith('P'))


def _is_cjk(char):
    code = ord(char)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F
            or 0x2B820 <= code <= 0x2CEAF or 0xF900 <= code <= 0xFAFF
            or 0x2F800 <= code <= 0x2FA1F)


def _is_control(char):
    return unicodedata.category(char) in ('Cc', 'Cf')


class WordPieceTokenizer:
    """Maps words to WordPiece ids of a BERT ``vocab.txt`` (id = line number).

    Args:
        vocab_path: str, the vocabulary file.
        lowercase: bool, lower-case and strip accents first (uncased vocabularies).
        max_word_length: int, longer words are one ``[UNK]``.

        >>> tokenizer = WordPieceTokenizer('vocab.txt')
        >>> tokenizer.pieces('unaffable')            # e.g. [4895, 10354, 3085]
    """

    def __init__(self, vocab_path, lowercase=True, max_word_length=200):
        self.vocab = {}
        with open(vocab_path, encoding='utf-8') as f:
            for i, line in enumerate(f):          # id = line number, as in the embeddings
                self.vocab.setdefault((line.split() or [line.strip()])[0], i)
        for token in ('[CLS]', '[SEP]', '[UNK]', '[PAD]'):
            if token not in self.vocab:
                raise ValueError(f'{vocab_path}: not a BERT vocabulary (no {token} line)')
        self.lowercase, self.max_word_length = lowercase, max_word_length
        self.cls, self.sep, self.unk = self.vocab['[CLS]'], self.vocab['[SEP]'], self.vocab['[UNK]']
        self._cache = {}

    def _basic_tokens(self, text):
        if self.lowercase:
            text = ''.join(c for c in unicodedata.normalize('NFD', text.lower())
                           if unicodedata.category(c) != 'Mn')
        spaced = []
        for char in text:
            if _is_punctuation(char) or _is_cjk(char):
                spaced.append(f' {char} ')
            elif char in ' \n\r\t' or unicodedata.category(char) == 'Zs':
                spaced.append(' ')
            elif ord(char) not in (0, 0xFFFD) and not _is_control(char):
                spaced.append(char)
        return ''.join(spaced).split()

    def _word_pieces(self, word):
        if len(word) > self.max_word_length:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else '##' + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    start = end
                    break
            else:
                return [self.unk]
        return ids

    def pieces(self, word):
        """Ids of one word (>= 1 id: an empty result becomes ``[UNK]``)."""
        ids = self._cache.get(word)
        if ids is None:
            ids = [i for token in self._basic_tokens(word) for i in self._word_pieces(token)]
            ids = ids or [self.unk]
            self._cache[word] = ids
        return ids

    def encode(self, words, maxlen=None):
        """``[CLS] pieces... [SEP]`` ids of a list of words, and where each word's pieces start.

        Args:
            words: list of str. maxlen: optional int, the most ids (words past it are dropped).
        Returns:
            ``(ids, starts)``: list of ints, and ``len(kept words) + 1`` piece offsets counted
            from position 1 (the pieces of word i are ``ids[1 + starts[i]:1 + starts[i + 1]]``).
        """
        ids, starts = [self.cls], [0]
        for word in words:
            pieces = self.pieces(word)
            if maxlen is not None and len(ids) + len(pieces) + 1 > maxlen:
                break
            ids.extend(pieces)
            starts.append(len(ids) - 1)
        return ids + [self.sep], starts
