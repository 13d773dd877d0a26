"""A client of an exported model that needs neither crf_lr nor bert4keras (docs/serving.md).

Text -> token ids (the exported ``vocab.txt``) -> the SavedModel, loaded here or served by
TensorFlow Serving -> entities with character offsets (the exported ``labels.json``), or words
for a segmentation model. For character models (Chinese): one character, one token, in plain
Python. A word model (English) is split into words and WordPieces by crf_lr, as
``crf_lr.serving.predict`` splits them. A text longer than ``maxlen - 2`` pieces (labels.json) must
be cut first; crf_lr cuts at sentence ends.

    python examples/serving_client.py exported/ner/1
    '中共中央总书记江泽民发表新年讲话' python examples/serving_client.py
    exported/conll/1 'Angela Merkel met Emmanuel Macron.' python examples/serving_client.py
    exported/ner/1 '江泽民发表讲话' \
        --url http://127.0.0.1:8501/v1/models/ner:predict         # TensorFlow Serving's REST API
"""
import argparse
import json
import os
import unicodedata
import urllib.request


class Client:
    """Encodes texts as the exported model expects and decodes its outputs (a character model's
    client imports neither crf_lr nor bert4keras).

        >>> client = Client('exported/ner/1')
        >>> client.predict(['中共中央总书记江泽民发表新年讲话'])   # SavedModel in
        this process [[{'start': 0, 'end': 4, 'type': 'ORG', 'text': '中共中央'}, ...]]
    """

    def __init__(self, folder, url=None):
        with open(os.path.join(folder, 'labels.json'), encoding='utf-8') as f:
            self.meta = json.load(f)
        self.vocab = {}
        with open(os.path.join(folder, 'vocab.txt'), encoding='utf-8') as f:
            for line_number, line in enumerate(f):         # id = line number
                self.vocab.setdefault((line.split() or [line.strip()])[0], line_number)
        self.folder, self.url, self.served = folder, url, None
        self.words = Words(folder, self.meta) if self.meta['units'] == 'words' else None

    def token_id(self, char):
        """The char as it is, lower-cased, NFKC-normalised (full-width -> ASCII), else [UNK]."""
        normal = unicodedata.normalize('NFKC', char)
        candidates = ([char, char.lower(), normal, normal.lower()] if self.meta['lowercase']
                      else [char, normal])
        return next((self.vocab[c] for c in candidates if c in self.vocab), self.vocab['[UNK]'])

    def encode(self, text):
        """``(ids, offsets, starts)``: ``[CLS] pieces [SEP]`` ids, each unit's ``(start, end)``
        character offsets, and where each unit's pieces start (``starts[-1]``: the pieces)."""
        if self.words:
            return self.words.encode(text)
        ids = [self.vocab['[CLS]']] + [self.token_id(c) for c in text] + [self.vocab['[SEP]']]
        return ids, [(i, i + 1) for i in range(len(text))], list(range(len(text) + 1))

    @staticmethod
    def inputs(ids):
        """``token_ids`` (rows of ``ids``) padded with 0, and ``segment_ids`` (all 0)."""
        width = max(map(len, ids))
        return {'token_ids': [row + [0] * (width - len(row)) for row in ids],
                'segment_ids': [[0] * width for _ in ids]}

    def outputs(self, inputs):
        """The signature's outputs as nested lists: over HTTP from TF Serving, or in-process."""
        if self.url:
            body = json.dumps({'signature_name': 'serving_default', 'inputs': inputs}).encode()
            request = urllib.request.Request(self.url, body, {'Content-Type': 'application/json'})
            with urllib.request.urlopen(request) as response:
                return json.load(response)['outputs']        # Python's json reads -Infinity
        import tensorflow as tf
        if self.served is None:
            self.served = tf.saved_model.load(self.folder).signatures['serving_default']
        result = self.served(**{k: tf.constant(v, tf.int32) for k, v in inputs.items()})
        return {k: v.numpy().tolist() for k, v in result.items()}

    def predict(self, texts):
        """Entities (dicts with start, end, type, text) per text, or words for a segmenter."""
        encoded = [self.encode(text) for text in texts]
        outputs = self.outputs(self.inputs([ids for ids, _, _ in encoded]))
        labels, results = self.meta['labels'], []
        for row, (text, (_, offsets, starts)) in enumerate(zip(texts, encoded)):
            if 'spans' in outputs:                         # GlobalPointer: (type, start, end)
                unit = {piece: i for i, piece in enumerate(starts)}     # a unit's first piece
                spans = [(unit[s], unit[e], labels[t]) for t, s, e in outputs['spans'][row]
                         if t >= 0 and s in unit and e in unit]         # not cutting a word
            else:
                tags = [labels[i] for i in outputs['label_ids'][row][:starts[-1]]]
                spans = self.tag_spans(self.words.unit_tags(tags, starts) if self.words else tags)
            chars = [(offsets[s][0], offsets[e - 1][1], kind) for s, e, kind in spans]
            results.append([text[s:e] for s, e, _ in chars] if self.meta['scheme'] == 'SEG'
                           else [self.entity(text, s, e, kind) for s, e, kind in chars])
        return results

    @staticmethod
    def entity(text, start, end, kind):
        return {'start': start, 'end': end, 'type': kind, 'text': text[start:end]}

    @staticmethod
    def tag_spans(tags):
        """``(start, end, type)`` of a legal tag path (the exported Viterbi keeps to the
        scheme): B/S start an entity, I/M/E of its type continue it, E/S end it; segmentation
        tags ``b m e s`` are words of type ``w``."""
        spans, open_ = [], None                            # open_: [start, type]
        for i, tag in enumerate(tags + ['O']):
            role, kind = (tag[0].upper(), tag[2:] or 'w')
            if open_ and (role in 'BSO' or kind != open_[1]):
                spans.append((open_[0], i, open_[1]))
                open_ = None
            if role != 'O' and open_ is None:
                open_ = [i, kind]
            if open_ and role in 'ES':
                spans.append((open_[0], i + 1, open_[1]))
                open_ = None
        return spans


class Words:
    """A word model's units: words and WordPieces as crf_lr splits and encodes them
    (``crf_lr.serving.predict``, ``crf_lr.data.pieces.UnitEncoder``), tags read back per word by the
    scheme."""

    def __init__(self, folder, meta):
        from crf_lr.data.pieces import UnitEncoder
        from crf_lr.serving.predict import word_offsets
        from crf_lr.data.tagging import get_scheme
        self.encoder = UnitEncoder(os.path.join(folder, 'vocab.txt'), 'words', meta['lowercase'],
                                   meta['maxlen'] - 2)
        self.split, self.scheme = word_offsets, get_scheme(meta['scheme'])

    def encode(self, text):
        """As :meth:`Client.encode`, for the words of ``text``."""
        words, offsets = self.split(text)
        ids, starts = self.encoder.encode(words)
        return ids, offsets, starts

    def unit_tags(self, tags, starts):
        """One tag per word from its pieces' tags: its first piece's (in BIOES and BMES its last
        piece's E or S also ends the entity there)."""
        index = [word for word in range(len(starts) - 1)
                 for _ in range(starts[word + 1] - starts[word])]
        return self.scheme.collect(index, tags, len(starts) - 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder', help='the exported folder (saved_model.pb, labels.json, '
                                       'vocab.txt)')
    parser.add_argument('texts', nargs='+')
    parser.add_argument('--url', help="TF Serving's predict URL (default: load the SavedModel)")
    parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
    args = parser.parse_args(argv)
    from crf_lr.utils.cli import quiet_tensorflow       # crf_lr's quiet console, before TensorFlow
    quiet_tensorflow(args.verbose, native=argv is None)      # not when a test calls main
    for text, result in zip(args.texts, Client(args.folder, args.url).predict(args.texts)):
        print(json.dumps({'text': text, 'result': result}, ensure_ascii=False))


if __name__ == '__main__':
    main()
