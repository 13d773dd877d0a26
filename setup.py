"""crf_lr: CRF with its own learning rate, GlobalPointer and bias-corrected Adam on bert4keras.

TensorFlow is ``tensorflow-cpu`` on x86-64 and ``tensorflow`` elsewhere (Arm: AWS Graviton,
Ampere), where ``tensorflow-cpu`` publishes no wheel and ``tensorflow``'s is a CPU build.
tf-keras and bert4keras are not listed here: their declared dependencies (``tensorflow``,
``keras<=2.3.1``) conflict with ``tensorflow-cpu``, so ``make install`` installs them with
``pip install --no-deps``.
"""
from setuptools import find_packages, setup

TENSORFLOW = ['tensorflow-cpu==2.21.0; platform_machine == "x86_64" or platform_machine == "AMD64"',
              'tensorflow==2.21.0; platform_machine != "x86_64" and platform_machine != "AMD64"']

setup(
    name='crf_lr',
    version='0.1.0',
    description='Sequence labelling on BERT-family encoders: CRF with its own learning rate, '
                'GlobalPointer, layer-wise Adam with a bias-correction switch.',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['crf_lr', 'crf_lr.*']),
    python_requires='>=3.10',
    # regex: the extended grapheme clusters (\X) that read as one character in character files
    install_requires=[*TENSORFLOW, 'numpy', 'tqdm', 'regex'],
    extras_require={
        # aiohttp: the client of benchmarks/serve_load.py (cheaper per request than httpx);
        # httpx2: what starlette's TestClient takes (with httpx alone it warns: deprecated)
        'test': ['pytest', 'pytest-xdist', 'seqeval', 'httpx', 'httpx2', 'selenium', 'aiohttp>=3.9',
                 'ruff'],
        'plots': ['matplotlib'],
        # peers only, never runtime dependencies; torch: install its CPU build first (make bench
        # does; PyPI's Linux torch pulls GBs of CUDA packages): docs/performance.md, "End to end"
        'bench': ['matplotlib', 'tensorflow-addons==0.23.0', 'typeguard<3', 'torch==2.13.0',
                  'transformers==5.24.0', 'pytorch-crf==0.7.2'],
        # crf_lr.serve; httptools, uvloop: uvicorn's C HTTP parser and event loop
        'serve': ['starlette>=0.40', 'uvicorn>=0.30', 'prometheus_client', 'httptools>=0.6',
                  'uvloop>=0.19'],
    },
    # the served page; C++ kernels
    package_data={'crf_lr': ['serving/static/*', 'speed/kernels/*.cc']},
    entry_points={'console_scripts': [
        'crf-lr-convert=crf_lr.model.convert:main',
        'crf-lr-predict=crf_lr.serving.predict:command',
        'crf-lr-export=crf_lr.serving.export:main',
        'crf-lr-serve=crf_lr.serve:main',
    ]},
)
