"""A saved model folder in use, without training code: its format (`model_folder`), `Tagger`
(`tagger`), `python -m crf_lr.predict` (`predict`), a SavedModel for TensorFlow Serving
(`export`), the HTTP API (`serve`, its request rules in `api`) and its page (`static/`).
"""
