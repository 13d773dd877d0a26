"""Export a saved model for TensorFlow Serving: one SavedModel with the decoding in its graph.

    python -m crf_lr.export runs/ner/model exported/ner/1       # 1: the version TF Serving loads

The ``serving_default`` signature takes ``token_ids`` and ``segment_ids`` (int32, ``[batch, n]``,
``[CLS] pieces [SEP]`` padded with 0, as :class:`~crf_lr.data.pieces.UnitEncoder` encodes) and
returns, in piece positions (row ``i`` is token ``i + 1``; ``P = n - 1``):

- tag heads (CRF, softmax): ``label_ids`` int32 ``[batch, P]`` (the best path under the scheme's
  constraints, -1 beyond the pieces), ``path_score`` float32 ``[batch]`` (its score: emissions,
  transitions, start and end, as the CRF scores it; softmax: the sum of log-probabilities),
  ``scores`` float32 ``[batch, P, L]`` (the model's output) and, for the CRF, ``marginals``
  float32 ``[batch, P, L]`` (each piece's label probabilities under the scheme's constraints, the
  forward-backward pass; rows beyond the pieces 0);
- span heads (GlobalPointer): ``spans`` int32 ``[batch, K, 3]`` (``type, start, end`` with the
  end exclusive, sorted by start; rows of -1 pad), ``span_scores`` float32 ``[batch, K]`` and
  ``scores`` float32 ``[batch, types, P, P]`` (``-inf`` in masked cells). A flat head keeps no
  overlapping spans (highest score first), exactly as :class:`~crf_lr.serving.tagger.Tagger`
  decodes.

The graph holds only TensorFlow ops (no XLA, no Python layers), so ``tf.saved_model.load`` and
TensorFlow Serving run it without crf_lr or bert4keras. ``labels.json`` and ``vocab.txt`` are
copied beside it: how a client turns text into ids and ids back into entities is in
docs/serving.md.

    >>> export('runs/ner/model', 'exported/ner/1')
    >>> served = tf.saved_model.load('exported/ner/1').signatures['serving_default']
    >>> served(token_ids=ids, segment_ids=tf.zeros_like(ids))['label_ids']   # (batch, n - 1)
"""
import os
import shutil

import numpy as np

from crf_lr.utils.atomic import check_folder_path, recover_folder, replace_folder
from crf_lr.serving.model_folder import check_model_folder
from crf_lr.utils.cli import ArgumentParser


def _tag_decoder(head):
    """``(scores, lengths) -> outputs`` of a CRF or softmax head: constrained Viterbi in graph."""
    from crf_lr.compat import tf
    from crf_lr.model.crf import crf_marginals, crf_sequence_score
    from crf_lr.model.heads import CRFHead, SoftmaxHead
    from crf_lr.decoding.viterbi import DISALLOWED_SCORE, constrained_parameters, viterbi_decode_tf
    if getattr(head, 'label_pieces', 'all') != 'all':   # the graph decodes every piece's scores
        raise ValueError('cannot export a head trained on first pieces only (--label-pieces '
                         'first): TensorFlow Serving would decode every piece; serve it with '
                         'python -m crf_lr.serve, or train with --label-pieces all')
    if isinstance(head, CRFHead):
        trans, start, end = (None if p is None else p.numpy()
                             for p in head.crf.effective_parameters('float64'))
        prepare = tf.identity
    elif isinstance(head, SoftmaxHead):
        trans, start, end = np.zeros((len(head.labels),) * 2), None, None
        prepare = lambda probabilities: tf.math.log(tf.maximum(probabilities, 1e-30))  # noqa: E731
    else:
        raise ValueError(f'cannot export a {type(head).__name__}: crf_lr.serving.export decodes '
                         f'CRF, softmax and GlobalPointer heads')
    parameters = [tf.constant(p, tf.float32) for p in constrained_parameters(
        trans, start, end, *head.scheme.allowed(head.labels))]
    crf = isinstance(head, CRFHead)

    def decode(scores, lengths):
        emissions = tf.maximum(prepare(scores), DISALLOWED_SCORE)        # padding: -inf -> -1e4
        mask = tf.sequence_mask(lengths, tf.shape(scores)[1])
        label_ids = viterbi_decode_tf(emissions, parameters[0], lengths=lengths,
                                      start=parameters[1], end=parameters[2], jit_compile=False)
        path_score = crf_sequence_score(emissions, tf.maximum(label_ids, 0), mask, *parameters)
        outputs = dict(label_ids=label_ids, path_score=path_score)
        if crf:                       # the forward-backward pass, without XLA (traced in export)
            outputs['marginals'] = tf.cast(crf_marginals(emissions, mask, *parameters), tf.float32)
        return outputs
    return decode


def _stable_order(keys):
    """Row-wise permutation ``[batch, K]`` sorting by ``keys`` (the first key most significant)."""
    from crf_lr.compat import tf
    order = tf.argsort(keys[-1], axis=1, stable=True)
    for key in reversed(keys[:-1]):
        order = tf.gather(order, tf.argsort(tf.gather(key, order, batch_dims=1), axis=1,
                                            stable=True), batch_dims=1)
    return order


def _span_decoder(head):
    """``(scores, lengths) -> outputs`` of a span head: cells above 0, flat or nested."""
    from crf_lr.compat import tf
    flat = head.flat

    def decode(scores, lengths):
        batch, pieces = tf.shape(scores)[0], tf.shape(scores)[2]
        position = tf.range(pieces)
        inside = position[None] < lengths[:, None]                             # (B, P)
        valid = (inside[:, :, None] & inside[:, None, :]
                 & (position[:, None] <= position[None, :])[None])
        cells = tf.cast(tf.where((scores > 0) & valid[:, None]), tf.int32)     # (hits, 4) b t i j

        def per_row(values, fill):                                             # (B, K)
            return tf.RaggedTensor.from_value_rowids(values, cells[:, 0], batch).to_tensor(fill)
        kind, start, last = (per_row(cells[:, c], -1) for c in (1, 2, 3))
        found_scores = per_row(tf.gather_nd(scores, cells), -np.inf)
        real = kind >= 0
        if flat:   # highest score first, ties: the earlier then the shorter span (spans.py)
            order = _stable_order([-found_scores, start, last])
            kind, start, last, real, found_scores = (tf.gather(x, order, batch_dims=1) for x in
                                                     (kind, start, last, real, found_scores))
            covers = ((position[None, None] >= start[..., None])
                      & (position[None, None] <= last[..., None]))            # (B, K, P)

            def keep_next(k, taken, kept):
                clash = tf.reduce_any(taken & covers[:, k], axis=1)
                keep = real[:, k] & ~clash
                return (k + 1, taken | (covers[:, k] & keep[:, None]),
                        kept.write(k, keep))
            count = tf.shape(kind)[1]
            _, _, kept = tf.while_loop(
                lambda k, *_: k < count, keep_next,
                [0, tf.zeros([batch, pieces], tf.bool), tf.TensorArray(tf.bool, size=count)])
            real = tf.transpose(tf.reshape(kept.stack(), [count, batch]))
        order = _stable_order([tf.cast(~real, tf.int32), start, last, kind])
        kind, start, last, real, found_scores = (tf.gather(x, order, batch_dims=1) for x in
                                                 (kind, start, last, real, found_scores))
        spans = tf.where(real[..., None], tf.stack([kind, start, last + 1], axis=-1), -1)
        return dict(spans=spans, span_scores=tf.where(real, found_scores, -np.inf))
    return decode


def serving_module(tagger):
    """A ``tf.Module`` holding the model's weights and a ``serve(token_ids, segment_ids)``
    function (see the module docstring for its outputs)."""
    from crf_lr.compat import tf
    model, head = tagger.model, tagger.head
    decode = _span_decoder(head) if head.kind == 'spans' else _tag_decoder(head)
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec], autograph=False)
    def serve(token_ids, segment_ids):
        scores = tf.cast(model([token_ids, segment_ids], training=False), tf.float32)
        lengths = tf.maximum(tf.reduce_sum(tf.cast(token_ids != 0, tf.int32), axis=1) - 2, 0)
        return dict(decode(scores, lengths), scores=scores)

    module = tf.Module()
    module.weights = list(model.weights)     # tracked, so the SavedModel holds them
    module.serve = serve
    return module


def export(model_dir, out_dir, overwrite=False):
    """Write the SavedModel of the model saved in ``model_dir`` to ``out_dir``, with its
    ``labels.json`` and ``vocab.txt`` beside it; atomic (built in a temporary folder beside it).

    An earlier export of ``out_dir`` killed between its two renames is put back first (and
    said so), before ``out_dir`` is checked.

    Raises:
        FileNotFoundError or ValueError for a model folder with files missing or damaged
        (``crf_lr.serving.model_folder.check_model_folder``); FileExistsError when ``out_dir``
        exists and not ``overwrite``; NotADirectoryError naming ``out_dir`` when it is a file;
        ValueError for a head that cannot be exported.
    """
    _, labels_path, vocab_path, _ = check_model_folder(model_dir)
    recover_folder(out_dir)
    check_folder_path(out_dir)                   # a file: --overwrite would not help
    if os.path.exists(out_dir) and not overwrite:
        raise FileExistsError(f'{out_dir} exists: choose another folder or pass --overwrite')
    from crf_lr.compat import flat_dense, tf
    from crf_lr.model.crf import use_xla
    from crf_lr.serving.tagger import Tagger
    module = serving_module(Tagger.load(model_dir))
    with replace_folder(out_dir) as building:    # a kill leaves the old export or the new one
        with use_xla(False), flat_dense():   # TF Serving runs no XLA: the CRF without it
            tf.saved_model.save(module, building, signatures={'serving_default': module.serve})
        for path in (labels_path, vocab_path):
            shutil.copyfile(path, os.path.join(building, os.path.basename(path)))
    return out_dir


def main(argv=None):
    from crf_lr.utils.cli import quiet_tensorflow
    parser = ArgumentParser(prog='python -m crf_lr.export',
                            description=__doc__.split('\n\n')[0])
    parser.add_argument('model_dir', help='the model/ folder of a task script run')
    parser.add_argument('out_dir', help='where to write the SavedModel (for TF Serving: '
                                        'MODELS/NAME/VERSION, e.g. exported/ner/1)')
    parser.add_argument('--overwrite', action='store_true', help='replace out_dir if it exists')
    parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
    args = parser.parse_args(argv)
    quiet_tensorflow(args.verbose, native=argv is None)   # not when a test calls main
    try:
        export(args.model_dir, args.out_dir, args.overwrite)   # checks its arguments first
    except (OSError, ValueError) as error:
        parser.error(str(error))
    print(f'wrote {args.out_dir}: a SavedModel (serving_default: token_ids, segment_ids) with '
          f'labels.json and vocab.txt')


if __name__ == '__main__':
    main()
