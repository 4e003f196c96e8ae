"""The lecture companion (`hf-seq studio`): a model's insides on one sentence, as pure functions and a web page.

Every view is a function `(loaded models, text, settings) -> a dict of arrays and token strings` in this package
(`tokens.py`: what the models predict, token by token; `inside.py`: what their states, gates, attention and scans
hold), usable from a notebook and tested without a server; `figure_*` draws a view's dict with matplotlib, and
`to_csv` writes it. The Gradio app (`app.py`, the optional extra `hf-seq[studio]`) only lays the views out.
"""

from hf_seq.studio.views import Loaded, to_csv

__all__ = ["Loaded", "to_csv"]
