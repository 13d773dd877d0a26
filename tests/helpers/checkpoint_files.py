"""Checkpoint files written without PyTorch: safetensors, the zip format of ``torch.save``,
and a tiny Hugging Face BERT folder with random weights.

    folder = tiny_hf_bert(str(tmp_path / 'hf'))   # config.json, vocab.txt, model.safetensors
"""
import json
import os
import struct
import zipfile

import numpy as np


def write_safetensors(path, tensors):
    """Minimal safetensors writer (the format: u64 header length, JSON header, raw bytes)."""
    codes = {np.dtype('float32'): 'F32', np.dtype('float16'): 'F16', np.dtype('int64'): 'I64'}
    header, blobs, offset = {}, [], 0
    for name, (array, code) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {'dtype': code or codes[array.dtype], 'shape': list(array.shape),
                        'data_offsets': [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(encoded)) + encoded + b''.join(blobs))


def torch_zip(path, payload, storages):
    """A PyTorch-format zip: archive/data.pkl + archive/data/<key>."""
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('archive/data.pkl', payload)
        for key, array in storages.items():
            z.writestr(f'archive/data/{key}', array.tobytes())
        z.writestr('archive/version', '3\n')


TINY_HF_CONFIG = dict(model_type='bert', vocab_size=10, hidden_size=4, num_hidden_layers=1,
            num_attention_heads=2, intermediate_size=6, max_position_embeddings=8,
            type_vocab_size=2, hidden_act='gelu', layer_norm_eps=1e-12)


def tiny_hf_bert(folder, config=TINY_HF_CONFIG, drop=(), prefix='', norm_names=('weight', 'bias')):
    """A Hugging Face BertModel folder with random weights, named as transformers names them
    (``prefix='bert.'`` as task models save them; ``norm_names=('gamma', 'beta')`` as old ones)."""
    h, i, rng = 4, 6, np.random.RandomState(0)
    shapes = {'embeddings.word_embeddings.weight': (10, h),
              'embeddings.position_embeddings.weight': (8, h),
              'embeddings.token_type_embeddings.weight': (2, h),
              'embeddings.LayerNorm.weight': (h,), 'embeddings.LayerNorm.bias': (h,),
              'pooler.dense.weight': (h, h), 'pooler.dense.bias': (h,)}
    for module, shape in (('attention.self.query', (h, h)), ('attention.self.key', (h, h)),
                          ('attention.self.value', (h, h)), ('attention.output.dense', (h, h)),
                          ('attention.output.LayerNorm', (h,)), ('intermediate.dense', (i, h)),
                          ('output.dense', (h, i)), ('output.LayerNorm', (h,))):
        shapes[f'encoder.layer.0.{module}.weight'] = shape
        shapes[f'encoder.layer.0.{module}.bias'] = shape[:1]
    os.makedirs(folder, exist_ok=True)
    renamed = {}
    for key, shape in shapes.items():
        if 'LayerNorm' in key:
            key = key.replace('.weight', '.' + norm_names[0]).replace('.bias', '.' + norm_names[1])
        renamed[prefix + key] = shape
    write_safetensors(os.path.join(folder, 'model.safetensors'),
                       {k: (rng.randn(*s).astype('float32'), None)
                        for k, s in renamed.items() if k not in drop})
    with open(os.path.join(folder, 'config.json'), 'w') as f:
        json.dump(config, f)
    with open(os.path.join(folder, 'vocab.txt'), 'w') as f:
        f.write('\n'.join(['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'a', 'b', 'c', 'd', 'e', 'f'])
                + '\n')
    return folder
