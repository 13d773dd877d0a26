"""What several test files share, no tests: the CRF's brute-force oracles (``crf_oracles``),
tiny models and their files (``tiny_models``), checkpoint files written without PyTorch
(``checkpoint_files``), training-step cases (``step_cases``), the float16 probe
(``float16_probe``) and the repository's folders (``paths``). tests/conftest.py puts tests/ on
``sys.path``, so a test file imports them as ``from helpers.crf_oracles import path_scores``."""
