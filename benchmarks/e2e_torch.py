"""The PyTorch side of the end-to-end benchmark, what a user would pick instead of crf_lr: a
``transformers`` encoder (``BertModel`` / ``AlbertModel``) with the same Hugging Face weights as
crf_lr's packaged encoder, a linear layer and ``pytorch-crf``'s ``CRF`` (or
``*ForTokenClassification`` for softmax), trained with ``torch.optim.AdamW`` (weight decay 0, eps
1e-6 as ``LayerwiseAdam``; the CRF's transitions at 100x the rate through a parameter group).

Scores are per piece as crf_lr's (``[CLS]`` dropped, ``[SEP]`` and padding masked); the CRF's start
and end transitions are zero and frozen (crf_lr's CRF has none by default), its loss is
``reduction='mean'`` over sequences (crf_lr's CRF loss is the mean of the per-sequence negative
log-likelihoods). bf16: ``torch.autocast('cpu', dtype=torch.bfloat16)`` around the forward; the
emissions go to the CRF in float32 (as crf_lr's CRF takes them).

    >>> side = TorchSide(job, 'crf', 'float32', threads=2)
    >>> losses = list(side.train(job['epochs'][0]))

Needs the ``bench`` extra (``pip install -e '.[bench]'``): torch (CPU build), transformers,
pytorch-crf; :func:`missing` names what is absent.
"""
import contextlib
import importlib.util

import numpy as np

from e2e_job import LR_MULTIPLIER

PEERS = {'torch': 'torch', 'transformers': 'transformers', 'torchcrf': 'pytorch-crf'}


def missing():
    """The pip names of the PyTorch peers that are not installed (empty: all present)."""
    return [name for module, name in PEERS.items() if importlib.util.find_spec(module) is None]


class TorchSide:
    """See the module docstring; ``precision``: 'float32' or 'bfloat16' (autocast)."""

    def __init__(self, job, head_name, precision, threads):
        import torch
        import transformers
        transformers.logging.set_verbosity_error()
        if threads is not None:                      # None: torch's defaults
            torch.set_num_threads(threads)
            torch.set_num_interop_threads(threads)
        torch.manual_seed(job['seed'])
        self.torch, self.head_name = torch, head_name
        self.autocast = ((lambda: torch.autocast('cpu', dtype=torch.bfloat16))
                         if precision == 'bfloat16' else contextlib.nullcontext)
        weights = job['head']
        if head_name == 'softmax':
            config = transformers.AutoConfig.from_pretrained(job['hf_folder'],
                                                             num_labels=len(job['labels']))
            config.classifier_dropout = config.classifier_dropout_prob = 0.0   # BERT's, ALBERT's
            self.model = transformers.AutoModelForTokenClassification.from_pretrained(
                job['hf_folder'], config=config,       # no dropout before the scores, as crf_lr
                ignore_mismatched_sizes=True)          # a packaged tagger's own classifier: ours
            classifier = self.model.classifier
            groups = [{'params': list(self.model.parameters())}]
        else:
            self.model = crf_tagger(torch, transformers.AutoModel.from_pretrained(
                job['hf_folder'], add_pooling_layer=False), len(job['labels']))
            classifier = self.model.dense
            self.model.crf.transitions.data = torch.from_numpy(weights['trans'])
            groups = [{'params': [p for n, p in self.model.named_parameters()
                                  if not n.startswith('crf.')]},
                      {'params': [self.model.crf.transitions], 'lr': job['lr'] * LR_MULTIPLIER}]
        classifier.weight.data = torch.from_numpy(weights['kernel'].T.copy())
        classifier.bias.data = torch.from_numpy(weights['bias'])
        self.optimizer = torch.optim.AdamW(groups, lr=job['lr'], betas=(0.9, 0.999), eps=1e-6,
                                           weight_decay=0.0)

    def _tensors(self, inputs, labels=None):
        """Token ids (batch, n) and the piece mask (batch, n - 1) as tensors; labels: the CRF's
        (batch, n - 1) or the token classifier's (batch, n) with -100 where no piece is."""
        torch = self.torch
        ids = torch.from_numpy(np.asarray(inputs[0], np.int64))
        mask = piece_mask(torch, ids)
        if labels is None:
            return ids, mask, None
        labels = torch.from_numpy(np.asarray(labels, np.int64))
        if self.head_name == 'softmax':
            full = torch.full(ids.shape, -100, dtype=torch.int64)
            full[:, 1:] = torch.where(mask, labels, -100)
            labels = full
        return ids, mask, labels

    def _loss(self, ids, mask, labels):
        with self.autocast():
            if self.head_name == 'softmax':
                return self.model(input_ids=ids, attention_mask=(ids != 0).long(),
                                  token_type_ids=self.torch.zeros_like(ids), labels=labels).loss
            emissions = self.model.emissions(ids)
        return -self.model.crf(emissions, labels, mask, reduction='mean')

    def train(self, batches):
        """Yield each step's loss (training ``batches`` in turn)."""
        self.model.train()
        for inputs, labels in batches:
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._loss(*self._tensors(inputs, labels))
            loss.backward()
            self.optimizer.step()
            yield float(loss.detach())

    def predict(self, inputs):
        """Label-id paths (one list per window) of a batch: ``crf.decode`` or argmax."""
        self.model.eval()
        ids, mask, _ = self._tensors(inputs)
        with self.torch.inference_mode(), self.autocast():
            if self.head_name == 'softmax':
                logits = self.model(input_ids=ids, attention_mask=(ids != 0).long(),
                                    token_type_ids=self.torch.zeros_like(ids)).logits
                best = logits[:, 1:].argmax(-1).numpy()
                return [row[:length] for row, length in zip(best, mask.sum(1).tolist())]
            return self.model.crf.decode(self.model.emissions(ids), mask)

    def loss(self, inputs, labels):
        """The loss of one batch, without dropout and without an update (float)."""
        self.model.eval()
        with self.torch.no_grad():
            return float(self._loss(*self._tensors(inputs, labels)))

    def seen(self, inputs, labels):
        """``(piece mask (batch, n - 1) bool, labels)`` as the loss sees them (-1: no piece)."""
        _, mask, labels = self._tensors(inputs, labels)
        if self.head_name == 'softmax':
            labels = labels[:, 1:]
            mask = labels != -100
        return mask.numpy(), np.where(mask.numpy(), labels.numpy(), -1)


def piece_mask(torch, ids):
    """True at the pieces of ``ids`` (batch, n) shifted past ``[CLS]``: (batch, n - 1) bool
    (position i is a piece iff token i + 2 exists, as ``crf_lr.model.heads.PieceStates``)."""
    real = ids[:, 2:] != 0
    return torch.cat([real, torch.zeros_like(real[:, :1])], dim=1)


def crf_tagger(torch, encoder, labels):
    """``encoder`` + ``Linear(hidden, labels)`` + ``torchcrf.CRF`` (start / end frozen at 0)."""
    from torchcrf import CRF

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.dense = torch.nn.Linear(encoder.config.hidden_size, labels)
            self.crf = CRF(labels, batch_first=True)
            for boundary in (self.crf.start_transitions, self.crf.end_transitions):
                boundary.data.zero_()
                boundary.requires_grad_(False)

        def emissions(self, ids):
            """Per-piece scores (batch, n - 1, labels), float32."""
            states = self.encoder(input_ids=ids, attention_mask=(ids != 0).long(),
                                  token_type_ids=torch.zeros_like(ids)).last_hidden_state
            return self.dense(states[:, 1:]).float()
    return Tagger()
