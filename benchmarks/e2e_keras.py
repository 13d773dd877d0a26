"""crf_lr's side of the end-to-end benchmark: ``examples/task_ner.py``'s model (bert4keras encoder,
``crf_lr.model.heads`` head: Dense + CRF with its transitions at 100x, or Dense + softmax), compiled
with ``LayerwiseAdam`` as the script compiles it, trained through
``crf_lr.training.loop.train_steps`` (the scripts' loop) or Keras's ``model.train_on_batch`` (what
bert4keras users write), plain or after ``crf_lr.training.loop.trace_once`` (``step='trace_once'``).

    >>> side = KerasSide(job, 'crf', 'float32', threads=2, step='train_steps')
    >>> losses = list(side.train(job['epochs'][0]))
    >>> side.predict(job['predict'][32][0])       # label-id paths, one per window
"""
import numpy as np

from e2e_job import LR_MULTIPLIER, piece_lengths


def pin_threads(tf, threads):
    """TensorFlow's intra- and inter-op thread pools, both ``threads`` (before any op runs;
    None: TensorFlow's defaults)."""
    if threads is None:
        return
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


class KerasSide:
    """See the module docstring; ``precision``: 'float32' or 'bfloat16' (``mixed_bfloat16``)."""

    def __init__(self, job, head_name, precision, threads, step='train_steps'):
        from crf_lr import set_precision
        from crf_lr.compat import keras, tf
        from crf_lr.model.encoders import load_encoder
        from crf_lr.model.heads import make_head, piece_states
        from crf_lr.training.optimizers import LayerwiseAdam
        pin_threads(tf, threads)
        tf.get_logger().setLevel('ERROR')
        set_precision('mixed_bfloat16' if precision == 'bfloat16' else 'float32')
        keras.utils.set_random_seed(job['seed'])
        bert, _, _ = load_encoder(job['encoder'])
        self.head = make_head(head_name, job['types'], 'BIO', lr_multiplier=LR_MULTIPLIER)
        self.model = keras.Model(bert.inputs, self.head.build(piece_states(bert)))
        weights = job['head']
        self.head.layers[0].set_weights([weights['kernel'], weights['bias']])
        if head_name == 'crf':
            self.head.crf.set_weights([weights['trans'] / LR_MULTIPLIER])
        self.model.compile(LayerwiseAdam(job['lr']), loss=self.head.loss,
                           metrics=self.head.metrics)
        self.maxlen, self.batch_size = job['maxlen'], job['batch_size']
        self.step, self.tf, self._trans, self._predicting = step, tf, None, None
        self._frozen = None                # whether Tagger.freeze froze it, once it is traced

    def train(self, batches):
        """Yield each step's loss (training ``batches`` in turn)."""
        from crf_lr.training.loop import trace_once, train_steps
        self._trans = self._predicting = None
        if self.step == 'train_steps':
            yield from train_steps(self.model, batches)
        else:
            if self.step == 'trace_once':              # traced at the first call only
                trace_once(self.model, batches[0])
            for inputs, labels in batches:
                yield float(np.atleast_1d(self.model.train_on_batch(inputs, labels))[0])

    def predict(self, inputs):
        """Label-id paths (one array per window) of a batch: the model's scores through the
        traced prediction step of the Tagger that the server runs (:meth:`predicting`, then
        ``Tagger.freeze`` after its first call, as ``crf_lr.serve`` does at start: bf16 weights
        as constants), then crf_lr's NumPy Viterbi (CRF, without the scheme's constraints, as
        pytorch-crf decodes) or argmax (softmax)."""
        from crf_lr.decoding.viterbi import DISALLOWED_SCORE, viterbi_decode
        tagger = self.predicting()
        scores = tagger.scores(inputs)
        if self._frozen is None:
            self._frozen = tagger.freeze()
        lengths = piece_lengths(inputs[0])
        if self.head.name == 'softmax':
            return [row[:length].argmax(-1) for row, length in zip(scores, lengths)]
        if self._trans is None:
            self._trans = self.head.crf.effective_parameters('float64')[0].numpy()
        return viterbi_decode(np.maximum(scores.astype(np.float64), DISALLOWED_SCORE), self._trans,
                              lengths=lengths)

    def predicting(self):
        """The trained model as ``crf_lr.serving.predict`` and the server load it (``Tagger.load``):
        saved, then loaded in the current precision, under ``mixed_bfloat16`` with the encoder's
        weights rounded to bf16 once (``crf_lr.model.precision.load_model``'s ``inference_only``)
        where the training model casts its float32 weights at every call."""
        if self._predicting is None:
            import os
            import tempfile
            from crf_lr.model.precision import load_model, save_model
            from crf_lr.serving.tagger import Tagger
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, 'model.h5')
                save_model(self.model, path)
                model = load_model(path, inference_only=True)
            self._predicting = Tagger(model, None, self.head, self.maxlen, self.batch_size)
        return self._predicting

    def loss(self, inputs, labels):
        """The compiled loss of one batch, without dropout and without an update (float)."""
        return float(np.atleast_1d(self.model.test_on_batch(inputs, labels))[0])

    def seen(self, inputs, labels):
        """``(piece mask (batch, n - 1) bool, labels)`` as the model's loss sees them."""
        layer = self.model.get_layer('Piece-States')
        mask = layer.compute_mask([None, self.tf.constant(inputs[0])]).numpy()
        return mask, np.where(mask, labels, -1)
