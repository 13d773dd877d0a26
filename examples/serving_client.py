"""A client of an exported model that needs neither crf_lr nor bert4keras (docs/serving.md).

Text -> token ids (the exported ``vocab.txt``) -> the SavedModel, loaded here or served by
TensorFlow Serving -> entities with character offsets (the exported ``labels.json``), or words
for a segmentation model. For character models (Chinese): one character, one token. A text longer
than ``maxlen - 2`` characters (labels.json) must be cut first; crf_lr cuts at sentence ends.

    python examples/serving_client.py exported/ner/1 '中共中央总书记江泽民发表新年讲话'
    python examples/serving_client.py exported/ner/1 '江泽民发表讲话' \
        --url http://127.0.0.1:8501/v1/models/ner:predict         # TensorFlow Serving's REST API
"""
import argparse
import json
import os
import unicodedata
import urllib.request


class Client:
    """Encodes texts as the exported model expects and decodes its outputs.

        >>> client = Client('exported/ner/1')
        >>> client.predict(['中共中央总书记江泽民发表新年讲话'])   # SavedModel in this process
        [[{'start': 0, 'end': 4, 'type': 'ORG', 'text': '中共中央'}, ...]]
    """

    def __init__(self, folder, url=None):
        with open(os.path.join(folder, 'labels.json'), encoding='utf-8') as f:
            self.meta = json.load(f)
        if self.meta['units'] != 'chars':
            raise ValueError('this client encodes character models; a word model needs its '
                             'WordPiece tokenizer')
        self.vocab = {}
        with open(os.path.join(folder, 'vocab.txt'), encoding='utf-8') as f:
            for line_number, line in enumerate(f):         # id = line number
                self.vocab.setdefault((line.split() or [line.strip()])[0], line_number)
        self.folder, self.url, self.served = folder, url, None

    def token_id(self, char):
        """The char as it is, lower-cased, NFKC-normalised (full-width -> ASCII), else [UNK]."""
        normal = unicodedata.normalize('NFKC', char)
        candidates = ([char, char.lower(), normal, normal.lower()] if self.meta['lowercase']
                      else [char, normal])
        return next((self.vocab[c] for c in candidates if c in self.vocab), self.vocab['[UNK]'])

    def inputs(self, texts):
        """``token_ids`` ``[CLS] chars [SEP]`` padded with 0, and ``segment_ids`` (all 0)."""
        width = max(len(text) for text in texts) + 2
        token_ids = [[self.vocab['[CLS]']] + [self.token_id(c) for c in text]
                     + [self.vocab['[SEP]']] + [0] * (width - len(text) - 2) for text in texts]
        return {'token_ids': token_ids, 'segment_ids': [[0] * width for _ in texts]}

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
        outputs = self.outputs(self.inputs(texts))
        if 'spans' in outputs:                             # GlobalPointer: (type, start, end)
            return [[self.entity(text, s, e, self.meta['labels'][t]) for t, s, e in rows if t >= 0]
                    for text, rows in zip(texts, outputs['spans'])]
        results = []
        for text, label_ids in zip(texts, outputs['label_ids']):
            tags = [self.meta['labels'][i] for i in label_ids[:len(text)]]
            spans = self.tag_spans(tags)
            results.append([text[s:e] for s, e, _ in spans] if self.meta['scheme'] == 'SEG'
                           else [self.entity(text, s, e, kind) for s, e, kind in spans])
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder', help='the exported folder (saved_model.pb, labels.json, '
                                       'vocab.txt)')
    parser.add_argument('texts', nargs='+')
    parser.add_argument('--url', help="TF Serving's predict URL (default: load the SavedModel)")
    args = parser.parse_args(argv)
    for text, result in zip(args.texts, Client(args.folder, args.url).predict(args.texts)):
        print(json.dumps({'text': text, 'result': result}, ensure_ascii=False))


if __name__ == '__main__':
    main()
