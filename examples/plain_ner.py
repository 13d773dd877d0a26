#! -*- coding: utf-8 -*-
"""Named-entity recognition written out, bert4keras style: ALBERT-tiny + Dense + CRF, top to bottom.

The packaged Chinese ALBERT-tiny (crf_lr.model.pretrained), a Dense layer giving one score per BIO
label and a ConditionalRandomField whose transitions learn lr_multiplier times faster; with --head
egp, an EfficientGlobalPointer trained with sparse_global_pointer_crossentropy instead. The
Evaluator scores dev after every epoch and keeps the best weights, which are scored once on test.

    python examples/plain_ner.py                     # the data/char-bio sample, about a minute
    python examples/plain_ner.py --head egp --epochs 10
    python examples/plain_ner.py --train my/train.txt --dev my/dev.txt --test my/test.txt
"""
import argparse
import os

from crf_lr.utils.cli import quiet_tensorflow     # before TensorFlow: bert4keras on tf-keras

sample = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data', 'char-bio')
parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
for split in ('train', 'dev', 'test'):
    parser.add_argument(f'--{split}', default=os.path.join(sample, f'{split}.txt'),
                        help='char-bio file (default: data/char-bio/%(dest)s.txt)')
parser.add_argument('--head', choices=('crf', 'egp'), default='crf', help='(default: crf)')
parser.add_argument('--epochs', type=int, default=10, help='(default: %(default)s)')
parser.add_argument('--batch-size', type=int, default=8, help='(default: %(default)s)')
parser.add_argument('--maxlen', type=int, default=128, help='(default: %(default)s)')
parser.add_argument('--lr', type=float, default=2e-4, help='(default: %(default)s)')
parser.add_argument('--crf-lr-multiplier', type=float, default=100, help='(default: %(default)s)')
parser.add_argument('--seed', type=int, default=0, help='(default: %(default)s)')
parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
args = parser.parse_args()
quiet_tensorflow(args.verbose)                          # TensorFlow loads from here on

import numpy as np  # noqa: E402
from bert4keras.models import build_transformer_model  # noqa: E402
from bert4keras.snippets import DataGenerator, sequence_padding  # noqa: E402
from bert4keras.tokenizers import Tokenizer  # noqa: E402
from crf_lr.compat import keras  # noqa: E402
from crf_lr.data.formats import read_corpus  # noqa: E402
from crf_lr.layers import ConditionalRandomField, EfficientGlobalPointer  # noqa: E402
from crf_lr.model.losses import sparse_global_pointer_crossentropy  # noqa: E402
from crf_lr.evaluation.metrics import span_scores  # noqa: E402
from crf_lr.training.optimizers import LayerwiseAdam  # noqa: E402
from crf_lr.model.pretrained import packaged_checkpoint  # noqa: E402
from crf_lr.decoding.spans import decode_spans, pad_sparse_targets, sparse_targets  # noqa: E402
from crf_lr.data.tagging import label_list, tags_to_spans  # noqa: E402

# ---- data: one character per token, BIO tags, spans (start, end exclusive, type) ----
train_data = read_corpus(args.train)
valid_data = read_corpus(args.dev, train_data.format, train_data.types)
test_data = read_corpus(args.test, train_data.format, train_data.types)
types = list(train_data.types)
labels = label_list(types)                              # 'O', 'B-LOC', 'I-LOC', ...
label_ids = {label: i for i, label in enumerate(labels)}

# ---- encoder: the packaged ALBERT-tiny, converted once into a cache ----
config_path, checkpoint_path, vocab_path, model_type, _ = packaged_checkpoint('albert-tiny-zh')
tokenizer = Tokenizer(vocab_path, do_lower_case=True)


def encode(text):
    """[CLS] one id per character [SEP] (characters beyond maxlen - 2 are cut)."""
    return tokenizer.tokens_to_ids(['[CLS]'] + list(text.lower())[:args.maxlen - 2] + ['[SEP]'])


class data_generator(DataGenerator):
    """Batches of ([token_ids, segment_ids], targets): tag ids (CRF) or span cells (EGP)."""

    def __iter__(self, random=False):
        batch_token_ids, batch_targets = [], []
        for is_end, example in self.sample(random):
            token_ids = encode(example.text)
            n = len(token_ids) - 2
            if args.head == 'crf':                          # [CLS] and [SEP] are tagged O
                batch_targets.append([0] + [label_ids[t] for t in example.tags[:n]] + [0])
            else:                                           # spans shift by 1 for [CLS]
                spans = [s for s in example.spans if s[1] <= n]
                batch_targets.append(sparse_targets(spans, n + 1, types, offset=1))
            batch_token_ids.append(token_ids)
            if len(batch_token_ids) == self.batch_size or is_end:
                token_ids = sequence_padding(batch_token_ids)
                targets = (sequence_padding(batch_targets) if args.head == 'crf'
                           else pad_sparse_targets(batch_targets))
                yield [token_ids, np.zeros_like(token_ids)], targets
                batch_token_ids, batch_targets = [], []


# ---- model: ALBERT -> Dense -> CRF (or ALBERT -> EfficientGlobalPointer) ----
keras.utils.set_random_seed(args.seed)
model = build_transformer_model(config_path, checkpoint_path, model=model_type)
if args.head == 'crf':
    output = keras.layers.Dense(len(labels))(model.output)
    CRF = ConditionalRandomField(lr_multiplier=args.crf_lr_multiplier, name='CRF')
    output = CRF(output)
    loss, metrics = CRF.sparse_loss, [CRF.sparse_accuracy]
else:
    output = EfficientGlobalPointer(heads=len(types), head_size=64, name='EGP')(model.output)
    loss, metrics = sparse_global_pointer_crossentropy, []
model = keras.models.Model(model.input, output)
model.summary()
model.compile(loss=loss, optimizer=LayerwiseAdam(args.lr), metrics=metrics)


def recognize(texts):
    """Predicted (start, end exclusive, type) spans of every text."""
    token_ids = sequence_padding([encode(text) for text in texts])
    scores = model.predict([token_ids, np.zeros_like(token_ids)], verbose=0)
    lengths = (token_ids > 0).sum(axis=1)
    if args.head == 'crf':
        paths = CRF.decode(scores, lengths=lengths)         # Viterbi with the learned transitions
        return [tags_to_spans([labels[i] for i in path[1:-1]], strict=False) for path in paths]
    return decode_spans(scores, lengths=lengths - 1, labels=types, offset=1)   # [SEP] left out


def evaluate(data):
    """Strict span F1 of the model on a dataset (spans cut at maxlen as the model sees them)."""
    n = args.maxlen - 2
    gold = [[s for s in example.spans if s[1] <= n] for example in data]
    return span_scores(gold, recognize([example.text for example in data]))['f1']


class Evaluator(keras.callbacks.Callback):
    """Scores dev after every epoch and keeps the best weights."""

    def __init__(self):
        super().__init__()
        self.best_val_f1, self.best_weights = -1, None

    def on_epoch_end(self, epoch, logs=None):
        f1 = evaluate(valid_data)
        if f1 > self.best_val_f1:
            self.best_val_f1, self.best_weights = f1, model.get_weights()
        print(f'valid:  f1: {f1:.5f}, best f1: {self.best_val_f1:.5f}')


evaluator = Evaluator()
train_generator = data_generator(train_data.examples, args.batch_size)
model.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=args.epochs,
          callbacks=[evaluator])
model.set_weights(evaluator.best_weights)
print(f'test:  f1: {evaluate(test_data):.5f} (best valid f1 {evaluator.best_val_f1:.5f})')
