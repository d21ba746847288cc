"""Rollscope's static files: the dashboard's stylesheets and browser scripts, and the embedded model's tool chat
template (``templates/``).

They live at the top of the repository and are installed as the package ``rollscope_assets``, so a plain
``pip install`` carries them; code reads them with ``importlib.resources.files("rollscope_assets")``.
"""
